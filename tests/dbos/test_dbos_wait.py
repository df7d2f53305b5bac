"""``wait`` for a run another process drives reads nothing while the run is suspended.

The run's workflow writes its stops (parked, ended) to a DBOS stream; the waiter reads
it through DBOS's notifications, so what a waiter costs does not grow with how long
the run waits. (On PostgreSQL DBOS is told by LISTEN/NOTIFY; on SQLite, which has no
notifications, DBOS's listener thread checks each registered reader once per interval,
as it does for every ``recv``: that is DBOS's mechanism, outside what is counted here.)
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any

import pytest
from dbos_spawn import drive, until, worker_up
from sqlalchemy import event

import perdure
from perdure import RunStatus
from perdure.testing import Processes, Receiver
from perdure_dbos import _compat

#: Set in the waiter's task: statements run in its context (and the threads it hands
#: work to, which copy it) are the waiter's.
WAITING: contextvars.ContextVar[bool] = contextvars.ContextVar("waiting", default=False)
#: The statements of one look at the run (its status, perdure's row, its executor's
#: beat) and one read of its stops stream. A wait that times out looks twice, before and
#: at its timeout; one that re-read the run while it waited (a poll) costs more.
ONE_LOOK = 5


@pytest.fixture
def waiter_statements() -> Iterator[list[str]]:
    """The SQL statements run in the waiter's context, as they run."""
    seen: list[str] = []

    def counted(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if WAITING.get():
            seen.append(statement)

    engine = _compat.system_engine()
    event.listen(engine, "before_cursor_execute", counted)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", counted)


async def _waiting(backend: Any, run_id: str, timeout: float) -> Any:
    WAITING.set(True)
    return await backend.wait(run_id, timeout=timeout)


async def test_a_waiter_reads_nothing_while_the_run_is_suspended_elsewhere(
    perdure_backend: Any, receiver: Receiver, processes: Processes, waiter_statements: list[str]
) -> None:
    # The run suspends in a process that then exits: it waits for its approval in the
    # database, driven by nobody; a worker will drive it when it is answered.
    first = drive(processes, "dbos_approval", "w", run_id="r-wait")
    assert first.wait() == 0, first.output()
    processes.worker("dbos_flows", env={"DBOS__VMID": "waiting-worker"})
    await worker_up("waiting-worker")
    assert (await perdure_backend.get_run("r-wait")).status is RunStatus.SUSPENDED

    with pytest.raises(TimeoutError):
        await asyncio.create_task(_waiting(perdure_backend, "r-wait", 3.0))
    assert len(waiter_statements) <= 2 * ONE_LOOK, waiter_statements

    # The waiter still wakes when the run ends there.
    before = len(waiter_statements)
    waiter = asyncio.create_task(_waiting(perdure_backend, "r-wait", 60.0))

    async def waiter_looked() -> Any:
        return True if len(waiter_statements) > before else len(waiter_statements)

    # Signal only once the waiter has looked at the suspended run, so it is the wake-up
    # that ends its wait, not a first look at a run that already ended.
    await until(waiter_looked, "the waiter looks at the suspended run")
    await perdure_backend.signal("r-wait", perdure.APPROVAL, {"approved": True}, by="ann")
    info = await waiter
    assert info.status is RunStatus.SUCCEEDED, info
    assert info.owner == "waiting-worker"
    assert receiver.applied["email"] == 1
