"""A suspended DBOS run holds nothing: its execution ended, and it costs no statements.

A run that waits for a signal (or a timer further than a nap) ends its DBOS execution as
a delayed DBOS workflow; a delivery enqueues it in the transaction that stores it, and a
worker drives it again. The suspension and a delivery decide on the run's row, so a
signal racing the suspension is taken either way, never lost.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event

from perdure import RunStatus
from perdure_dbos import _compat
from perdure_dbos._backend import RECOVERY_QUEUE, runtime
from perdure_dbos._tables import Marks

SUSPENDED = 20
#: Seconds over which the suspended runs' statements are counted.
WINDOW = 2.0


async def test_suspended_runs_end_their_execution_and_cost_no_statements_while_they_wait(
    perdure_backend: Any, flows: Any
) -> None:
    run_ids = [f"idle-{i}" for i in range(SUSPENDED)]
    for run_id in run_ids:
        await perdure_backend.start(flows.gated, (run_id,), {}, run_id=run_id)
    await perdure_backend.idle()
    for run_id in run_ids:
        info = await perdure_backend.get_run(run_id)
        assert info.status is RunStatus.SUSPENDED and info.waiting_for == "go", info
        # Not PENDING in an execution that waits: a delayed workflow nobody drives.
        assert info.details["dbos"]["status"] == _compat.DELAYED, info.details
    assert runtime().live == {}  # no coroutine of theirs left in this process

    engine = _compat.system_engine()
    seen: list[str] = []

    def counted(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        seen.append(f"{statement} {parameters!r}")

    event.listen(engine, "before_cursor_execute", counted)
    try:
        await asyncio.sleep(WINDOW)  # the window the waiting runs are observed over
    finally:
        event.remove(engine, "before_cursor_execute", counted)
    # DBOS's background jobs and perdure's heartbeat run per process, whatever waits;
    # nothing here is per suspended run (a recv of each polled per interval, before).
    about_runs = [s for s in seen if any(r in s for r in run_ids)]
    assert about_runs == [], about_runs[:5]

    await perdure_backend.signal(run_ids[0], "go", None)
    done = await perdure_backend.wait(run_ids[0], timeout=120)
    assert done.status is RunStatus.SUCCEEDED, done


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_signal_racing_the_suspension_is_taken(
    perdure_backend: Any, flows: Any, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """The signal lands just before the suspension's write (after the drive looked at
    the inbox and found nothing) or just after it: the run takes it either way."""
    run_id = f"race-{when}"
    suspend = Marks.suspend
    outcomes: list[str] = []

    def racing(self: Marks, rid: str, *args: Any) -> str:
        if rid != run_id or outcomes:
            return suspend(self, rid, *args)
        if when == "before":
            self.deliver(rid, "go", "raced", None)
        outcome = suspend(self, rid, *args)
        if when == "after":
            self.deliver(rid, "go", "raced", None)
        outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(Marks, "suspend", racing)
    await perdure_backend.start(flows.gated, (run_id,), {}, run_id=run_id)
    info = await perdure_backend.wait(run_id, timeout=120)
    assert info.status is RunStatus.SUCCEEDED, info
    # Before: the suspension saw the delivery and the drive went on; after: the delivery
    # found the run suspended and enqueued it.
    assert outcomes == ["woken" if when == "before" else "suspended"]
    taken = [e for e in await perdure_backend.history(run_id) if e.name == "go"]
    assert [e.data["payload"] for e in taken if e.kind.value == "signal_received"] == ["raced"]


async def test_a_run_woken_by_another_process_is_driven_by_its_starter_when_no_worker_runs(
    perdure_backend: Any, flows: Any, processes: Any
) -> None:
    """The starter is no worker; another process (the CLI) signals the suspended run.
    DBOS enqueues it on perdure's queue, and the starter, an executor of that queue since
    the run's execution here suspended, dequeues and finishes it."""
    run_id = "woken-elsewhere"
    await perdure_backend.start(flows.gated, (run_id,), {}, run_id=run_id)
    await perdure_backend.idle()
    info = await perdure_backend.get_run(run_id)
    assert info.details["dbos"]["status"] == _compat.DELAYED, info.details
    rt = runtime()
    assert RECOVERY_QUEUE in rt.listening and rt.slots.limit is None  # listening, not serving
    answered = processes.cli("signal", run_id, "go")
    assert answered.returncode == 0, answered.stderr
    done = await perdure_backend.wait(run_id, timeout=120)
    assert done.status is RunStatus.SUCCEEDED, done
