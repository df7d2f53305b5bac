"""A re-drive of a suspended DBOS run (a wake, a recovery) is the run still waiting.

DBOS re-drives a run from the top whenever its execution wakes (a signal, an operator,
its timer) or another executor recovers it; the replay reaches the same wait again.
Throughout, the run is what its history says, suspended on that wait: an answer sent
meanwhile is taken (exactly one), and a status is shown only once the history that led
there is durable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure._errors import ApprovalNotPendingError
from perdure.testing import wait_for_status
from perdure_dbos._journal import DbosJournal, read_history
from perdure_dbos._tables import Marks


@pytest.fixture
def gated() -> Iterator[Any]:
    import dbos_gated_flows

    dbos_gated_flows.GATE = dbos_gated_flows.Gate()  # its events belong to this test's loop
    yield dbos_gated_flows
    dbos_gated_flows.GATE.opened.set()  # never leave a drive held for the next test


async def test_an_answer_sent_while_a_re_drive_replays_to_the_wait_is_taken(
    perdure_backend: Any, gated: Any
) -> None:
    run_id = "held-approval"
    await perdure_backend.start(gated.gated_approval, ("A",), {}, run_id=run_id)
    await wait_for_status(perdure_backend, run_id, (RunStatus.SUSPENDED,))
    gated.GATE.close()
    await perdure_backend.signal(run_id, "poke", None, by="ann")  # wakes it: a re-drive
    await gated.GATE.reached.wait()  # the re-drive replayed `prepare` and is held

    info = await perdure_backend.get_run(run_id)
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == perdure.APPROVAL, info
    await perdure_backend.signal(run_id, perdure.APPROVAL, {"approved": True}, by="bob")
    with pytest.raises(ApprovalNotPendingError):
        await perdure_backend.signal(run_id, perdure.APPROVAL, {"approved": False}, by="eve")

    gated.GATE.opened.set()
    done = await wait_for_status(perdure_backend, run_id, (RunStatus.SUCCEEDED,))
    assert done.result == {"approved": True}
    history = await perdure_backend.history(run_id)
    senders = [e.data["sent_by"] for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert senders == ["bob"]


async def test_a_run_whose_signal_came_reads_as_due_until_its_drive_moves_on(
    perdure_backend: Any, gated: Any
) -> None:
    run_id = "held-signal"
    await perdure_backend.start(gated.gated_signal, ("S",), {}, run_id=run_id)
    await wait_for_status(perdure_backend, run_id, (RunStatus.SUSPENDED,))
    gated.GATE.close()
    await perdure_backend.signal(run_id, "go", "yes", by="ann")
    await gated.GATE.reached.wait()

    # Not "waits for go" as if nobody had sent it: a caller waiting for the run's next
    # stop (LangGraph's invoke) must not take this for it.
    info = await perdure_backend.get_run(run_id)
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == "go", info
    assert info.wake_at is not None and info.wake_at <= time.time(), info

    gated.GATE.opened.set()
    done = await wait_for_status(perdure_backend, run_id, (RunStatus.SUCCEEDED,))
    assert done.result == "yes"


async def test_an_answer_landing_while_the_drive_suspends_again_is_taken_once(
    perdure_backend: Any, gated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = "late-answer-twice"
    await perdure_backend.start(gated.gated_approval, ("T",), {}, run_id=run_id)
    await wait_for_status(perdure_backend, run_id, (RunStatus.SUSPENDED,))
    looked = DbosJournal.next_signal
    second: list[BaseException | None] = []

    async def answer_right_after_looking(self: DbosJournal, name: str) -> Any:
        found = await looked(self, name)
        if found is None and not second:
            await perdure_backend.signal(run_id, perdure.APPROVAL, {"approved": True}, by="bob")
            gated.GATE.close()  # hold the drive that takes the answer
            second.append(None)
        return found

    monkeypatch.setattr(DbosJournal, "next_signal", answer_right_after_looking)
    await perdure_backend.signal(run_id, "poke", None, by="ann")
    await gated.GATE.reached.wait()  # the drive woken by bob's answer, held before it
    # The drive that missed bob's answer recorded its wait after it: still answered.
    info = await perdure_backend.get_run(run_id)
    assert info.status is RunStatus.SUSPENDED and info.waiting_for is None, info
    with pytest.raises(ApprovalNotPendingError):
        await perdure_backend.signal(run_id, perdure.APPROVAL, {"approved": False}, by="eve")
    gated.GATE.opened.set()
    done = await wait_for_status(perdure_backend, run_id, (RunStatus.SUCCEEDED,))
    assert done.result == {"approved": True}


async def test_a_status_is_shown_only_once_the_history_leading_there_is_durable(
    perdure_backend: Any, gated: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[tuple[RunStatus, EventKind]] = []
    apply = Marks.apply

    def checked(self: Marks, run_id: str, update: Any, taken: Any = ()) -> bool:
        found, _ = read_history(run_id, None, 0.0)
        assert not isinstance(found, Exception)
        shown.append((update.status, found[0][-1].kind))
        return apply(self, run_id, update, taken)

    monkeypatch.setattr(Marks, "apply", checked)
    handle = await perdure_backend.start(gated.gated_steps, ("D",), {}, run_id="durable-first")
    await wait_for_status(perdure_backend, "durable-first", (RunStatus.SUSPENDED,))
    await perdure_backend.signal("durable-first", "go", 1, by="ann")
    assert await handle.result() == {"first": "prepared-D", "answer": 1}
    assert (await handle.history())[-1].kind is EventKind.RUN_SUCCEEDED
    assert shown == [
        (RunStatus.SUSPENDED, EventKind.SUSPENDED),
        (RunStatus.SUCCEEDED, EventKind.RUN_SUCCEEDED),
    ]
