"""Suspension across process exits, approval from another process, cancellation with
compensation, and replay against changed code."""

from __future__ import annotations

from typing import Any

from perdure import EventKind, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)


async def test_a_run_waits_for_approval_across_process_exits_and_resumes_elsewhere(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    # Process 1 starts the run; it suspends for approval and the process exits.
    first = processes.drive("scenarios", "approval", "7", run_id="r-approval")
    assert first.wait() == 0, first.output()
    info = await perdure_backend.get_run("r-approval")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "approval"

    # Process 2 approves from the CLI; process 3, a worker, finishes the run.
    approved = processes.cli("approve", "r-approval", "--by", "alice", "--message", "ok")
    assert approved.returncode == 0, approved.stderr
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-approval", ENDED)
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == {"approved": True, "message": "ok"}
    assert receiver.applied["charge"] == 1
    assert receiver.applied["email"] == 1

    received = [
        e
        for e in await perdure_backend.history("r-approval")
        if e.kind is EventKind.SIGNAL_RECEIVED
    ]
    assert len(received) == 1
    assert received[0].data["sent_by"] == "alice"
    assert received[0].data["payload"] == {"approved": True, "message": "ok"}


async def test_an_approval_sent_before_the_wait_is_refused_and_never_answers_it(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    """Approvals are requests: one sent before the wait began is refused (exit 5), so
    it cannot answer a request nobody has seen. Plain signals may still arrive early
    (tests/core/test_engine.py, signals sent before the wait)."""
    hold = receiver.hold("charge", "before")
    driver = processes.drive("scenarios", "approval", "8", run_id="r-early")
    receiver.wait_held(hold)
    rejected = processes.cli("reject", "r-early", "--by", "bob", "--message", "no")
    assert rejected.returncode == 5, rejected.stdout + rejected.stderr
    assert "no approval is pending" in rejected.stdout + rejected.stderr
    hold.release.set()
    assert driver.wait() == 0, driver.output()
    info = await wait_for_status(perdure_backend, "r-early", (RunStatus.SUSPENDED,))
    assert info.waiting_for == "approval" and info.request_id is not None
    approved = processes.cli("approve", "r-early", "--by", "ann", "--message", "yes")
    assert approved.returncode == 0, approved.stderr
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-early", ENDED)
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == {"approved": True, "message": "yes"}
    assert receiver.applied["email"] == 1


async def test_cancellation_compensates_completed_steps_once_in_reverse_order(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    first = processes.drive("scenarios", "saga", "o1", run_id="r-saga")
    assert first.wait() == 0, first.output()
    assert (await perdure_backend.get_run("r-saga")).status is RunStatus.SUSPENDED

    cancelled = processes.cli("cancel", "r-saga")
    assert cancelled.returncode == 0, cancelled.stderr
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-saga", ENDED)
    assert info.status is RunStatus.CANCELLED
    assert receiver.applied["charge"] == 2
    assert receiver.applied["refund"] == 2
    assert receiver.bodies["refund"] == [{"charge": "charge-2"}, {"charge": "charge-1"}]
    compensations = [
        e.name
        for e in await perdure_backend.history("r-saga")
        if e.kind is EventKind.STEP_COMPLETED and e.name.startswith("compensate")
    ]
    assert compensations == ["compensate:charge_with_refund", "compensate:charge_with_refund"]


async def test_replay_against_changed_code_stops_with_a_determinism_error_naming_the_step(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    first = processes.drive("scenarios", "approval", "9", run_id="r-changed")
    assert first.wait() == 0, first.output()
    approved = processes.cli("approve", "r-changed", "--by", "ops")
    assert approved.returncode == 0, approved.stderr

    # Before the deploy, `perdure replay` checks the history against each version of
    # the code, in memory: the same code matches, the changed code is refused, by step.
    requests = dict(receiver.requests)
    before = await perdure_backend.history("r-changed")
    same = processes.cli("replay", "scenarios", "--run", "r-changed")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "matches" in same.stdout
    changed = processes.cli(
        "replay", "scenarios", "--run", "r-changed", env={"PERDURE_SCENARIO_VARIANT": "v2"}
    )
    assert changed.returncode == 5, changed.stdout + changed.stderr
    assert "DIFFERS at 1:lookup_v2" in changed.stdout
    assert dict(receiver.requests) == requests  # nothing ran
    assert await perdure_backend.history("r-changed") == before  # nothing was written

    processes.worker("scenarios", env={"PERDURE_SCENARIO_VARIANT": "v2"})
    info = await wait_for_status(perdure_backend, "r-changed", ENDED)
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "determinism"
    assert info.attention["step_key"] == "1:lookup_v2"
    assert "1:lookup" in info.attention["message"]
    # The history the run had is intact.
    kinds = [e.kind for e in await perdure_backend.history("r-changed")]
    assert kinds.count(EventKind.STEP_COMPLETED) == 2
