"""``drive``: run a workflow from its history to its next stop, and end the run there.

The end of a drive is one of: the run succeeded, failed (an exception of the user's
code), was cancelled (after compensating), is suspended (waiting for a signal or a
timer), or is parked ``needs-attention`` (an unknown outcome, a failed compensation,
history and code that disagree). Each is the drive's last append, with a ``RunUpdate``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from perdure._context import StepSpec, current_run
from perdure._errors import DeterminismError, SerializationError, StepFailedError
from perdure._records import Event, NewEvent, RunStatus
from perdure._semantics import events as ev
from perdure._semantics.attention import broken_attention, compensation_failed
from perdure._semantics.context import Cancelled, DriveContext, DriveStopped, Interrupt
from perdure._semantics.journal import Journal
from perdure._semantics.observe import DriveStart, observing
from perdure._serialization import to_jsonable
from perdure._store import RunUpdate
from perdure._workflow import Workflow

__all__ = ["drive", "park_broken"]

log = logging.getLogger("perdure.semantics")


async def drive(
    journal: Journal,
    workflow: Workflow[..., Any],
    stored_input: Any,
    history: Iterable[Event],
    *,
    replay_only: bool = False,
    carried: dict[str, NewEvent] | None = None,
    details: Mapping[str, Any] | None = None,
) -> RunStatus:
    """Drive the run ``journal`` records to its next stop; return the status written.

    ``stored_input`` is the run's input as stored (``events.encode_input``), ``history``
    every event recorded so far, oldest first. Call it in a task of its own with a fresh
    ``contextvars.Context()``: the workflow's steps find the run through a context
    variable. Raises what the journal raised (``LeaseLostError`` when another owner took
    the run, a substrate error), ``Drained`` when the journal started draining, and
    ``ReplayEnd`` on a ``replay_only`` drive; every exception of the user's code is
    recorded, never raised. ``carried`` is the run's dict of completions executed but not
    recorded by an earlier drive in this process (see ``DriveContext.carried``).
    ``details`` is the run record's ``RunInfo.details`` (the trace context the run was
    started in, for its drive span). Registered observers (``observe``) see the drive.
    """
    observers = observing(DriveStart(journal.run_id, workflow.name, details or {}))
    try:
        status = await _drive(
            DriveContext(
                journal, history, replay_only=replay_only, carried=carried, observers=observers
            ),
            workflow,
            stored_input,
        )
    except BaseException as exc:
        if observers is not None:
            observers.ended(None, exc)
        raise
    if observers is not None:
        observers.ended(status)
    return status


async def _drive(ctx: DriveContext, workflow: Workflow[..., Any], stored_input: Any) -> RunStatus:
    token = current_run.set(ctx)
    try:
        try:
            args, kwargs = ev.decode_input(ctx.run_id, stored_input)
        except Exception as exc:
            log.error("run %s cannot be replayed: %s", ctx.run_id, exc)
            return await park_broken(ctx, exc)
        return await _run(ctx, workflow, args, kwargs)
    finally:
        current_run.reset(token)


class Appends(Protocol):
    """What ``park_broken`` writes to: a ``Journal``, or a drive's ``DriveContext``."""

    async def append(self, events: list[NewEvent], *, update: RunUpdate | None = None) -> None: ...


async def park_broken(journal: Appends, exc: BaseException) -> RunStatus:
    """Park the run: its history and code disagree, or its history cannot be read.

    Parked, not failed, so deploying compatible code (or repairing the record) and
    ``perdure resume`` can still finish it. For a backend whose history failed to load
    before ``drive`` could start.
    """
    events, update = _parked(exc)
    await journal.append(events, update=update)
    return RunStatus.NEEDS_ATTENTION


def _parked(exc: BaseException) -> tuple[list[NewEvent], RunUpdate]:
    attention = broken_attention(exc)
    return [ev.needs_attention(attention)], RunUpdate(
        RunStatus.NEEDS_ATTENTION, attention=attention
    )


async def _run(
    ctx: DriveContext, workflow: Workflow[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> RunStatus:
    ctx.enter()
    try:
        try:
            result = await workflow.fn(*args, **kwargs)
        except Cancelled:
            return await _cancel(ctx)
        except Exception as exc:
            if isinstance(exc, DeterminismError):
                ctx.fail_determinism(exc)
            if ctx.broken is not None:
                return await _stop_broken(ctx)
            error = ev.run_failed_error(exc)
            return await _end(ctx, RunStatus.FAILED, ev.run_failed(error), error=error)
        if ctx.broken is None:
            with contextlib.suppress(DeterminismError):
                ctx.check_fully_replayed()
        if ctx.broken is not None:
            return await _stop_broken(ctx)
        try:
            encoded = to_jsonable(result, f"result of run {ctx.run_id!r}")
        except SerializationError as exc:
            error = ev.error_info(exc)
            return await _end(ctx, RunStatus.FAILED, ev.run_failed(error), error=error)
        return await _end(ctx, RunStatus.SUCCEEDED, ev.run_succeeded(encoded), result=encoded)
    except Interrupt as stop:
        if ctx.stopped is not None:
            raise ctx.stopped from None
        await ctx.append(stop.events, update=stop.update)
        return stop.update.status
    except DriveStopped as stop:
        raise stop.cause from None


async def _end(
    ctx: DriveContext,
    status: RunStatus,
    event: NewEvent,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> RunStatus:
    await ctx.append([event], update=RunUpdate(status, result=result, error=error))
    return status


async def _stop_broken(ctx: DriveContext) -> RunStatus:
    """The workflow ended after the drive broke, even if it swallowed the error."""
    if ctx.stopped is not None:
        raise ctx.stopped
    broken = ctx.mismatch or ctx.unreadable
    assert broken is not None
    events, update = _parked(broken)
    await ctx.append(events, update=update)
    return RunStatus.NEEDS_ATTENTION


async def _cancel(ctx: DriveContext) -> RunStatus:
    """Compensate completed steps, newest first, each as a recorded step."""
    ctx.cancelling = True
    await ctx.record_cancel_request()
    compensated: list[str] = []
    for comp in reversed(ctx.compensations):
        spec = StepSpec(f"compensate:{comp.key.partition(':')[2]}")
        try:
            await ctx.step(spec, comp.fn, (comp.result,), {})
        except StepFailedError as exc:
            attention = compensation_failed(exc.step_key, str(exc), compensated)
            await ctx.append(
                [ev.needs_attention(attention, exc.step_key, spec.name)],
                update=RunUpdate(RunStatus.NEEDS_ATTENTION, attention=attention),
            )
            return RunStatus.NEEDS_ATTENTION
        compensated.append(comp.key)
    return await _end(ctx, RunStatus.CANCELLED, ev.run_cancelled(compensated))
