"""What a run costs perdure's own tables on DBOS, beyond DBOS's own work (issue 16).

A run started and waited for in one process reads perdure's run row only joined to
DBOS's ``workflow_status`` row (one statement for both), never this process's own
executor beat (the process asking is alive), and writes its row three times: created,
running, ended. Counted as SQL statements on DBOS's system engine, not timed.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

import perdure
from perdure_dbos import _compat


@perdure.step
async def counted_step(i: int) -> int:
    return i


@perdure.workflow(name="dbos_five_steps")
async def five_steps() -> int:
    total = 0
    for i in range(5):
        total += await counted_step(i)
    return total


@pytest.fixture
def statements(perdure_backend: Any) -> Iterator[list[str]]:
    """The SQL statements DBOS's system engine runs, lowercased, as they run."""
    seen: list[str] = []

    def counted(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.lower().split()))

    engine = _compat.system_engine()
    event.listen(engine, "before_cursor_execute", counted)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", counted)


async def test_a_run_reads_its_row_with_dbos_status_and_not_its_own_executor_beat(
    perdure_backend: Any, statements: list[str]
) -> None:
    warm = await perdure_backend.start(five_steps, (), {}, run_id="warm-up")
    assert await warm.result() == 10
    statements.clear()

    handle = await perdure_backend.start(five_steps, (), {}, run_id="counted")
    assert await handle.result() == 10

    ours = [s for s in statements if "perdure_dbos_runs" in s]
    reads = [s for s in ours if s.startswith("select")]
    assert reads, statements
    alone = [s for s in reads if "workflow_status" not in s]
    assert not alone, alone
    beats = [s for s in statements if s.startswith("select") and "perdure_dbos_executors" in s]
    assert not beats, beats
    writes = [s for s in ours if s.startswith(("insert", "update"))]
    assert len(writes) == 3, writes


@perdure.workflow(name="dbos_until_go")
async def until_go() -> str:
    await perdure.wait_for_signal("go")
    return "went"


#: Set in the waiter's task: statements run in its context (and the threads it hands
#: work to, which copy it) are the waiter's.
WAITING: contextvars.ContextVar[bool] = contextvars.ContextVar("waiting", default=False)


async def _waiting(backend: Any, run_id: str) -> Any:
    WAITING.set(True)
    return await backend.wait(run_id, timeout=60)


async def test_a_waiter_does_not_look_again_when_another_run_here_changes(
    perdure_backend: Any, statements: list[str]
) -> None:
    # Run A waits for a signal in this process; while a waiter waits for it, run B runs
    # here from start to end (its execution begins, takes a slot, ends): none of that is
    # A's, so A's waiter, having looked at A once and begun reading A's stops stream,
    # runs no statement until A is signalled. What it reads after the signal depends on
    # how A's wake-up and end interleave with it (and, on a loaded machine, on DBOS
    # recording the workflow's return a moment after A's end): not counted here.
    # This process is an executor of perdure's queue, as a worker is: A, suspended and
    # then woken, is driven here again (without one, the signal below would make it one).
    await perdure_backend._listen()  # pyright: ignore[reportPrivateUsage]
    seen: list[str] = []

    def counted(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if WAITING.get():
            seen.append(statement)

    handle = await perdure_backend.start(until_go, (), {}, run_id="a")
    await perdure_backend.idle()
    engine = _compat.system_engine()
    event.listen(engine, "before_cursor_execute", counted)
    try:
        waiter = asyncio.create_task(_waiting(perdure_backend, "a"))
        while len(seen) < 2:  # its first look and its stream read: it waits now
            await asyncio.sleep(0.01)
        before_b = list(seen)
        other = await perdure_backend.start(five_steps, (), {}, run_id="b")
        assert await other.result() == 10
        await perdure_backend.idle()
        # B's execution began and ended while the waiter waited (two wake-ups of every
        # waiter of this process, B's five steps apart): it looked at neither.
        assert seen == before_b, seen[len(before_b) :]
        assert not waiter.done()
        await perdure_backend.signal("a", "go")
        assert (await waiter).status is perdure.RunStatus.SUCCEEDED
    finally:
        event.remove(engine, "before_cursor_execute", counted)
    assert await handle.result() == "went"


async def test_an_execution_reads_its_run_and_its_history_on_one_connection(
    perdure_backend: Any,
) -> None:
    # Each load of a drive reads DBOS's status row joined to perdure's (creation time,
    # cancel flag, deliveries) and then the run's step rows, on the connection it
    # checked out once: not one connection per read.
    seen: list[tuple[Any, str]] = []

    def counted(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append((conn, " ".join(statement.lower().split())))

    engine = _compat.system_engine()
    event.listen(engine, "before_cursor_execute", counted)
    try:
        handle = await perdure_backend.start(five_steps, (), {}, run_id="one-read")
        assert await handle.result() == 10
    finally:
        event.remove(engine, "before_cursor_execute", counted)

    def is_history(s: str) -> bool:
        return s.startswith("select") and "operation_outputs.function_name" in s and "order by" in s

    def is_run(s: str) -> bool:
        return s.startswith("select") and "workflow_status" in s and "perdure_dbos_runs" in s

    loads = [i for i, (_, s) in enumerate(seen) if is_history(s)]
    assert loads, [s for _, s in seen]
    for i in loads:
        conn = seen[i][0]
        assert any(c is conn and is_run(s) for c, s in seen[:i]), seen[: i + 1]
    flags = [s for _, s in seen if s.startswith("select perdure_dbos_runs.cancel_requested,")]
    assert not flags, flags
