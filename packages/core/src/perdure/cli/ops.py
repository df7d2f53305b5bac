"""Operations on one run: signal, approve, reject, resume, cancel, reconcile."""

from __future__ import annotations

from typing import Any

from perdure.backend import Backend, ReconcileOutcome
from perdure.cli.common import UsageProblem, connected, default_user, out, parse_json
from perdure.cli.render import run_summary
from perdure.errors import ApprovalNotPendingError
from perdure.records import RunInfo, RunStatus
from perdure.semantics.approvals import channel


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


async def _signal(backend: Backend, run_id: str, name: str, payload: Any, by: str | None) -> str:
    await backend.signal(run_id, name, payload, by=by)
    info = await backend.get_run(run_id)
    if info.status is RunStatus.SUSPENDED and (
        info.waiting_for == name or (info.waiting_for is None and info.wake_at is not None)
    ):
        return (
            "it resumes when its process or a `perdure worker` importing its workflow picks it up"
        )
    return f"the run is {info.status.value}; it receives the signal when it waits for {name!r}"


async def send_signal(
    url: str | None, run_id: str, name: str, data: str | None, by: str | None
) -> None:
    payload = parse_json("--data", data)
    by = by or default_user()
    async with connected(url) as backend:
        hint = await _signal(backend, run_id, name, payload, by)
    _say(f"sent signal {name!r} to run {run_id}" + (f" as {by}" if by else "") + f"; {hint}")


async def decide(
    url: str | None,
    run_id: str,
    approved: bool,
    by: str | None,
    message: str | None,
    request: str | None = None,
) -> None:
    """Answer approval request ``request`` of the run, by default the one pending (read
    and shown first; the answer names it, so it never lands on a later request)."""
    by = by or default_user()
    payload = {"approved": approved, "message": message}
    async with connected(url) as backend:
        if request is None:
            info = await backend.get_run(run_id)
            if info.request_id is None:
                raise ApprovalNotPendingError(
                    run_id, None, f"the run is {info.status.value}: {_next(info)}"
                )
            request = info.request_id
            _say(f"run {run_id} {run_summary(info, info.attention)}")
        hint = await _signal(backend, run_id, channel(request), payload, by)
    verb = "approved" if approved else "rejected"
    _say(f"{verb} request {request} of run {run_id}" + (f" as {by}" if by else "") + f"; {hint}")


async def resume(url: str | None, run_id: str) -> None:
    async with connected(url) as backend:
        info = await backend.resume(run_id)
    _say(f"resumed: {_next(info)}")


async def cancel(url: str | None, run_id: str) -> None:
    async with connected(url) as backend:
        info = await backend.cancel(run_id)
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
) -> None:
    value = parse_json("--result", result)
    by = by or default_user()
    async with connected(url) as backend:
        info = await backend.reconcile(run_id, step, outcome, result=value, message=message, by=by)
    _say(
        f"reconciled step {step} of run {run_id} as {outcome}"
        + (f" (by {by})" if by else "")
        + f"; {_next(info)}"
    )
