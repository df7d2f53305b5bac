"""The drive observers live in ``perdure._semantics``: a backend that only supplies a
``Journal`` and calls ``drive`` (no engine, no ``RunDriver``) is observed, its appends
timed, and an observer that raises never reaches the drive or the workflow."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from console_workflows import refund

from perdure._errors import LeaseLostError
from perdure._records import Event, EventKind, NewEvent, RunStatus
from perdure._semantics import drive, events, observe
from perdure.testing.journals import ListJournal


class Seen:
    def __init__(self, start: observe.DriveStart) -> None:
        self.start = start
        self.batches: list[tuple[list[str], float]] = []
        self.end: tuple[str, BaseException | None] | None = None

    def appended(self, events: Sequence[NewEvent], seconds: float) -> None:
        self.batches.append(([e.kind.value for e in events], seconds))

    def ended(self, outcome: str, error: BaseException | None) -> None:
        self.end = (outcome, error)


@pytest.fixture
def seen() -> Iterator[list[Seen]]:
    drives: list[Seen] = []

    def observer(start: observe.DriveStart) -> Seen:
        drives.append(Seen(start))
        return drives[-1]

    def broken(start: observe.DriveStart) -> Any:
        raise RuntimeError("an observer's own bug")

    observe.register(observer)
    observe.register(broken)
    try:
        yield drives
    finally:
        observe.unregister(observer)
        observe.unregister(broken)


async def drive_refund(journal: ListJournal) -> RunStatus:
    """A first drive, as a backend makes it: in a task with a fresh context."""
    stored = events.encode_input(journal.run_id, ("order-1", 100), {})
    history = [Event(journal.run_id, 0, EventKind.RUN_STARTED, time.time(), data=stored)]
    task = asyncio.get_running_loop().create_task(
        drive(journal, refund, stored, history, details={"traceparent": "x"}),
        context=contextvars.Context(),
    )
    return await task


async def test_a_journal_backend_is_observed_without_code_of_its_own(seen: list[Seen]) -> None:
    journal = ListJournal("observed-1")
    status = await drive_refund(journal)

    assert status is RunStatus.SUSPENDED
    (watch,) = seen
    assert watch.start == observe.DriveStart("observed-1", refund.name, {"traceparent": "x"})
    assert [kinds for kinds, _ in watch.batches] == [
        [e.kind.value for e in batch] for batch in journal.appended
    ]
    assert all(seconds >= 0 for _, seconds in watch.batches)
    assert watch.end == ("suspended", None)


async def test_a_lost_lease_ends_the_observation_without_a_failure(seen: list[Seen]) -> None:
    journal = ListJournal("observed-2", lost_after=0)
    with pytest.raises(LeaseLostError):
        await drive_refund(journal)
    (watch,) = seen
    assert watch.batches == [] and watch.end == ("lease-lost", None)
