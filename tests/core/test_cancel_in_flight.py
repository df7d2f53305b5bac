"""The semantics of a step in flight when the run is cancelled (``spi.RUN_CANCELLED``),
on a journal in memory: the backend that delivers such a cancel (Temporal) is tested in
tests/temporal/test_temporal_cancel.py; this pins what the shared module does with it."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

import perdure
from perdure.spi import (
    RUN_CANCELLED,
    Event,
    EventKind,
    RunStatus,
    drive,
    events,
)
from perdure.testing.journals import ListJournal

RELEASED: list[str] = []
#: Set by ``forever`` when its body runs (one per test: an event belongs to one loop).
BEGAN: list[asyncio.Event] = []


def _release(held: str) -> None:
    RELEASED.append(held)


@perdure.step(compensate=_release)
def hold(name: str) -> str:
    return name


@perdure.step
async def forever() -> None:
    BEGAN[-1].set()
    await asyncio.Event().wait()


@perdure.workflow(name="cancel_in_flight_core")
async def hold_then_wait() -> None:
    await hold("seat")
    await forever()


async def _drive_until_in_flight(journal: ListJournal) -> asyncio.Task[RunStatus]:
    RELEASED.clear()
    BEGAN.append(asyncio.Event())
    stored = events.encode_input("r", (), {})
    history = [Event("r", 0, EventKind.RUN_STARTED, 0.0, data=stored)]
    workflow: Any = hold_then_wait
    task = asyncio.get_running_loop().create_task(
        drive(journal, workflow, stored, history), context=contextvars.Context()
    )
    await BEGAN[-1].wait()
    return task


async def test_the_run_cancelled_in_flight_compensates_and_ends_cancelled() -> None:
    journal = ListJournal("r")
    task = await _drive_until_in_flight(journal)

    journal.cancel_requested = True
    task.cancel(RUN_CANCELLED)

    assert await task is RunStatus.CANCELLED
    assert RELEASED == ["seat"]
    assert journal.appended[-1][-1].kind is EventKind.RUN_CANCELLED


async def test_any_other_cancellation_of_the_drive_propagates() -> None:
    journal = ListJournal("r")
    task = await _drive_until_in_flight(journal)

    journal.cancel_requested = True  # requested, but this is a shutdown's cancellation
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert RELEASED == []
    assert journal.updates == [None] * len(journal.updates)  # no status was applied
