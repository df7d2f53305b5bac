"""Operations on one run: signal, approve, reject, resume, cancel, reconcile."""

from __future__ import annotations

from typing import Any

from perdure._backend import ReconcileOutcome
from perdure._cli.common import UsageProblem, connected, out, parse_json
from perdure._cli.render import run_summary
from perdure._records import Event, EventKind, RunInfo, RunStatus
from perdure._semantics.approvals import APPROVAL


def _say(text: str) -> None:
    out().print(text, markup=False, soft_wrap=True)


def _next(info: RunInfo) -> str:
    """What happens to the run now, as a hint after an operation."""
    if info.status.terminal:
        return f"run {info.run_id} is {info.status.value}"
    if info.status is RunStatus.SUSPENDED and info.waiting_for is None and info.wake_at is not None:
        return (
            f"run {info.run_id} is due; its process or a `perdure worker` "
            "importing its workflow resumes it"
        )
    summary = run_summary(info)
    return f"run {info.run_id} is {info.status.value}" + (f": {summary}" if summary else "")


def _hint(info: RunInfo, name: str) -> str:
    if info.status is RunStatus.SUSPENDED and (
        info.waiting_for == name or (info.waiting_for is None and info.wake_at is not None)
    ):
        return (
            "it resumes when its process or a `perdure worker` importing its workflow picks it up"
        )
    return f"the run is {info.status.value}; it receives the signal when it waits for {name!r}"


async def send_signal(
    url: str | None,
    run_id: str,
    name: str,
    data: str | None,
    by: str | None,
    token: str | None = None,
) -> None:
    payload = parse_json("--data", data)
    async with connected(url) as backend:
        decision = await backend.signal(run_id, name, payload, by=by, token=token)
        hint = _hint(await backend.get_run(run_id), name)
    _say(f"sent signal {name!r} to run {run_id} as {decision.actor}; {hint}")


async def decide(
    url: str | None,
    run_id: str,
    approved: bool,
    by: str | None,
    message: str | None,
    request: str | None = None,
    token: str | None = None,
) -> None:
    """Answer approval request ``request`` of the run, by default the one pending (read
    and shown first; the answer names it, so it never lands on a later request)."""
    async with connected(url) as backend:
        info = await backend.get_run(run_id)
        if request is None and info.request_id is not None:
            _say(f"run {run_id} {run_summary(info, info.attention)}")
        answer = backend.approve if approved else backend.reject
        answered = await answer(run_id, request, message=message, by=by, token=token, info=info)
        hint = _hint(await backend.get_run(run_id), APPROVAL)
    verb = "approved" if approved else "rejected"
    _say(f"{verb} request {answered.request} of run {run_id} as {answered.decision.actor}; {hint}")


async def resume(
    url: str | None, run_id: str, by: str | None = None, token: str | None = None
) -> None:
    async with connected(url) as backend:
        info = await backend.resume(run_id, by=by, token=token)
    _say(f"resumed: {_next(info)}")


async def cancel(
    url: str | None, run_id: str, by: str | None = None, token: str | None = None
) -> None:
    async with connected(url) as backend:
        info = await backend.cancel(run_id, by=by, token=token)
    if info.status.terminal:
        _say(f"cancelled: {_next(info)}")
    else:
        _say(
            f"cancel requested for run {run_id}; it stops (compensating completed steps) "
            "when its process or a `perdure worker` next drives it"
        )


def reconcile_outcome(
    succeeded: bool,
    failed: bool,
    retry: bool,
    result: str | None,
) -> ReconcileOutcome:
    chosen = [
        name
        for name, on in (("--succeeded", succeeded), ("--failed", failed), ("--retry", retry))
        if on
    ]
    if len(chosen) != 1:
        raise UsageProblem(
            "choose exactly one of --succeeded, --failed, --retry"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    if result is not None and not succeeded:
        raise UsageProblem("--result only goes with --succeeded")
    if succeeded:
        return "succeeded"
    return "failed" if failed else "retry"


async def reconcile(
    url: str | None,
    run_id: str,
    step: str,
    outcome: ReconcileOutcome,
    result: str | None,
    message: str | None,
    by: str | None,
    token: str | None = None,
) -> None:
    value = parse_json("--result", result)
    async with connected(url) as backend:
        info = await backend.reconcile(
            run_id, step, outcome, result=value, message=message, by=by, token=token
        )
        actor = _reconciled_by(await backend.history(run_id), step)
    _say(
        f"reconciled step {step} of run {run_id} as {outcome}"
        + (f" (by {actor})" if actor else "")
        + f"; {_next(info)}"
    )


def _reconciled_by(history: list[Event], step: str) -> str | None:
    for event in reversed(history):
        if event.kind is EventKind.RECONCILED and event.step_key == step:
            data: dict[str, Any] = event.data or {}
            by = data.get("by")
            return by if isinstance(by, str) else None
    return None
