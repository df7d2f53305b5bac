"""What a run costs perdure's own tables on DBOS, beyond DBOS's own work (issue 16).

A run started and waited for in one process reads perdure's run row only joined to
DBOS's ``workflow_status`` row (one statement for both), never this process's own
executor beat (the process asking is alive), and writes its row three times: created,
running, ended. Counted as SQL statements on DBOS's system engine, not timed.
"""

from __future__ import annotations

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
