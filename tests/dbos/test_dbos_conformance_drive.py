"""The conformance scenarios whose first process must exit once the run suspends.

``perdure.testing.drive`` waits for the end of a non-embedded run; until it calls
``Backend.idle()`` for every backend, these copies start the run with ``dbos_drive``
(which does) and then check exactly what the conformance scenarios check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from perdure import EventKind, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)
CONFORMANCE = Path(__file__).parent.parent / "conformance"


def drive(processes: Processes, workflow: str, *args: Any, run_id: str) -> Any:
    path = os.pathsep.join([str(CONFORMANCE), processes.env["PYTHONPATH"]])
    proc = processes.spawn(
        "-m",
        "dbos_drive",
        "--url",
        processes.url,
        "--module",
        "scenarios",
        "--workflow",
        workflow,
        "--run-id",
        run_id,
        "--input",
        json.dumps({"args": list(args), "kwargs": {}}),
        env={"PYTHONPATH": path},
    )
    assert proc.wait() == 0, proc.output()
    return proc


def worker(processes: Processes, **env: str) -> None:
    path = os.pathsep.join([str(CONFORMANCE), processes.env["PYTHONPATH"]])
    processes.worker("scenarios", env={"PYTHONPATH": path, **env})


async def test_approval_across_process_exits(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    drive(processes, "approval", "7", run_id="r-approval")
    info = await perdure_backend.get_run("r-approval")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "approval"
    approved = processes.cli("approve", "r-approval", "--by", "alice", "--message", "ok")
    assert approved.returncode == 0, approved.stderr
    worker(processes)
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


async def test_cancellation_compensates_in_reverse_order(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    drive(processes, "saga", "o1", run_id="r-saga")
    assert (await perdure_backend.get_run("r-saga")).status is RunStatus.SUSPENDED
    cancelled = processes.cli("cancel", "r-saga")
    assert cancelled.returncode == 0, cancelled.stderr
    worker(processes)
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


async def test_changed_code_parks_with_a_determinism_error_naming_the_step(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    drive(processes, "approval", "9", run_id="r-changed")
    approved = processes.cli("approve", "r-changed")
    assert approved.returncode == 0, approved.stderr
    worker(processes, PERDURE_SCENARIO_VARIANT="v2")
    info = await wait_for_status(perdure_backend, "r-changed", ENDED)
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "determinism"
    assert info.attention["step_key"] == "1:lookup_v2"
    assert "1:lookup" in info.attention["message"]
    kinds = [e.kind for e in await perdure_backend.history("r-changed")]
    assert kinds.count(EventKind.STEP_COMPLETED) == 2


async def test_a_5mb_step_result_survives_a_process_exit(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    size = 5 * 1024 * 1024
    drive(processes, "large", size, run_id="r-large")
    signalled = processes.cli("signal", "r-large", "go")
    assert signalled.returncode == 0, signalled.stderr
    worker(processes)
    info = await wait_for_status(perdure_backend, "r-large", ENDED)
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == size
