"""Drives one run: replays its history through the workflow and writes what is new."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from perdure.context import StepSpec, current_run
from perdure.engine.outages import Drained, SubstrateFault
from perdure.engine.replay import Cancelled, EmbeddedRunContext, Interrupt, error_info
from perdure.errors import (
    CorruptHistoryError,
    DeterminismError,
    LeaseLostError,
    SerializationError,
    StepFailedError,
)
from perdure.records import EventKind, NewEvent, RunInfo, RunStatus
from perdure.serialization import from_jsonable, to_jsonable
from perdure.store import Lease, RunUpdate, Store
from perdure.telemetry import DriveObserver
from perdure.workflow import Workflow

if TYPE_CHECKING:
    from perdure.engine.backend import EmbeddedBackend

log = logging.getLogger("perdure.engine")

T = TypeVar("T")


class RunDriver:
    """Owns ``lease`` for the length of one drive of its run."""

    def __init__(
        self,
        backend: EmbeddedBackend,
        lease: Lease,
        workflow: Workflow[..., Any],
        carried: dict[str, NewEvent] | None = None,
    ) -> None:
        self.backend = backend
        self.store: Store = backend.store
        self.lease = lease
        self.workflow = workflow
        self.cancelling = False
        #: Completions of steps an earlier drive of this run in this process executed
        #: but could not record (the substrate went away): recorded, not re-run.
        self.carried: dict[str, NewEvent] = {} if carried is None else carried
        # Parallel steps (asyncio tasks of one run) append one at a time: each write
        # takes the next sequence number of the lease.
        self._writing = asyncio.Lock()
        self.observer = DriveObserver(lease.run_id)

    async def append(
        self,
        events: list[NewEvent],
        *,
        consume_signal: int | None = None,
        update: RunUpdate | None = None,
    ) -> None:
        async with self._writing:
            started = time.perf_counter()
            try:
                await self.store.append(
                    self.lease,
                    events,
                    lease_seconds=self.backend.lease_seconds,
                    update=update,
                    consume_signal=consume_signal,
                )
            except LeaseLostError:
                raise
            except Exception as exc:
                for ev in events:
                    if ev.kind is EventKind.STEP_COMPLETED and ev.step_key is not None:
                        self.carried[ev.step_key] = ev
                raise self._fault(exc) from exc
            self.observer.appended(events, time.perf_counter() - started)

    async def read(self, call: Awaitable[T]) -> T:
        """A store read of the drive; its failure unwinds the drive (``SubstrateFault``)."""
        try:
            return await call
        except Exception as exc:
            raise self._fault(exc) from exc

    def _fault(self, exc: Exception) -> SubstrateFault:
        # An error no one classified came from the store itself, not from user code.
        return SubstrateFault(exc, self.store.classify(exc) or "permanent")

    async def drive(self) -> RunStatus | None:
        """Run the workflow to its next stop. Returns the status written, or None when
        the lease was lost to another owner.

        Raises ``SubstrateFault`` when the substrate failed and the run could not even
        be parked: the caller drives it again later (``EmbeddedBackend``).
        """
        run_id = self.lease.run_id
        try:
            info = await self.store.get_run(run_id)
            history = await self.store.load_history(run_id)
            args, kwargs = _decode_input(info)
        except Exception as exc:
            if self.store.classify(exc) == "transient":
                raise SubstrateFault(exc, "transient") from exc
            log.error("run %s cannot be replayed: %s", run_id, exc)
            return await self._park_broken(exc)
        ctx = EmbeddedRunContext(self, history)
        token = current_run.set(ctx)
        self.observer.began(info)
        try:
            status = await self._drive(ctx, args, kwargs)
        except LeaseLostError:
            log.info("run %s: lease lost to another owner; stopping this drive", run_id)
            status = None
        except Drained:
            log.info("run %s: shutting down; released for another worker", run_id)
            with contextlib.suppress(Exception):
                await self.store.release(self.lease)
            status = None
        except SubstrateFault as fault:
            if fault.transient:
                self.observer.ended(None, fault)
                raise
            log.error("run %s: the substrate refused: %s; parking it", run_id, fault.error)
            status = await self._park_broken(fault.error)
        except BaseException as exc:
            self.observer.ended(None, exc)
            raise
        finally:
            current_run.reset(token)
        self.observer.ended(status)
        return status

    async def _drive(
        self, ctx: EmbeddedRunContext, args: list[Any], kwargs: dict[str, Any]
    ) -> RunStatus:
        ctx.enter()
        try:
            try:
                result = await self.workflow.fn(*args, **kwargs)
            except Cancelled:
                return await self._cancel(ctx)
            except Interrupt:
                raise
            except Exception as exc:
                if isinstance(exc, DeterminismError):
                    ctx.fail_determinism(exc)
                if ctx.broken is not None:
                    return await self._stop_broken(ctx)
                error = error_info(exc)
                if isinstance(exc, StepFailedError):
                    error.update(
                        step=exc.step_key,
                        attempts=exc.attempts,
                        cause={"type": exc.error_type, "message": exc.error_message},
                    )
                await self._finish(
                    RunStatus.FAILED, [NewEvent(EventKind.RUN_FAILED, data=error)], error=error
                )
                return RunStatus.FAILED
            if ctx.broken is None:
                with contextlib.suppress(DeterminismError):
                    ctx.check_fully_replayed()
            if ctx.broken is not None:
                return await self._stop_broken(ctx)
            try:
                encoded = to_jsonable(result, f"result of run {self.lease.run_id!r}")
            except SerializationError as exc:
                error = error_info(exc)
                await self._finish(
                    RunStatus.FAILED, [NewEvent(EventKind.RUN_FAILED, data=error)], error=error
                )
                return RunStatus.FAILED
            await self._finish(
                RunStatus.SUCCEEDED,
                [NewEvent(EventKind.RUN_SUCCEEDED, data={"result": encoded})],
                result=encoded,
            )
            return RunStatus.SUCCEEDED
        except Interrupt as stop:
            await self.append(stop.events, update=stop.update)
            return stop.update.status

    async def _stop_broken(self, ctx: EmbeddedRunContext) -> RunStatus:
        """The workflow ended after replay broke, even if it swallowed the error."""
        if isinstance(ctx.broken, LeaseLostError):
            raise ctx.broken
        assert ctx.broken is not None
        return await self._park_broken(ctx.broken)

    async def _finish(
        self,
        status: RunStatus,
        events: list[NewEvent],
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        await self.append(events, update=RunUpdate(status, result=result, error=error))

    async def _cancel(self, ctx: EmbeddedRunContext) -> RunStatus:
        """Compensate completed steps, newest first, each as a recorded step."""
        self.cancelling = True
        compensated: list[str] = []
        for comp in reversed(ctx.compensations):
            spec = StepSpec(f"compensate:{comp.key.partition(':')[2]}")
            try:
                await ctx.step(spec, comp.fn, (comp.result,), {})
            except StepFailedError as exc:
                attention = {
                    "reason": "compensation-failed",
                    "step_key": exc.step_key,
                    "message": str(exc),
                    "compensated": compensated,
                }
                await self.append(
                    [NewEvent(EventKind.NEEDS_ATTENTION, exc.step_key, spec.name, attention)],
                    update=RunUpdate(RunStatus.NEEDS_ATTENTION, attention=attention),
                )
                return RunStatus.NEEDS_ATTENTION
            compensated.append(comp.key)
        await self._finish(
            RunStatus.CANCELLED,
            [NewEvent(EventKind.RUN_CANCELLED, data={"compensated": compensated})],
        )
        return RunStatus.CANCELLED

    async def _park_broken(self, exc: BaseException) -> RunStatus:
        """History and code disagree, or the history is unreadable: stop and say where.

        The run is parked, not failed, so deploying compatible code and
        ``perdure resume`` can still finish it.
        """
        attention: dict[str, Any] = {"reason": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, DeterminismError):
            attention.update(reason="determinism", step_key=exc.step_key)
        elif isinstance(exc, CorruptHistoryError):
            # A stored record cannot be read back: name which one.
            attention.update(seq=exc.seq, step_key=exc.step_key)
        await self.append(
            [NewEvent(EventKind.NEEDS_ATTENTION, data=attention)],
            update=RunUpdate(RunStatus.NEEDS_ATTENTION, attention=attention),
        )
        return RunStatus.NEEDS_ATTENTION


def _decode_input(info: RunInfo) -> tuple[list[Any], dict[str, Any]]:
    data: Any = from_jsonable(info.input, f"input of run {info.run_id!r}")
    if not isinstance(data, dict) or "args" not in data:
        raise SerializationError(f"input of run {info.run_id!r} is not an args/kwargs record")
    record = cast(dict[str, Any], data)
    return list(record["args"]), dict(record.get("kwargs") or {})


def encode_input(run_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return to_jsonable({"args": list(args), "kwargs": kwargs}, f"input of run {run_id!r}")
