"""Start a DBOS run in a process of its own (``dbos_drive``), for the crash tests, and
wait for a condition on other processes' runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from perdure.testing import Patience, Process, Processes


async def until(check: Callable[[], Awaitable[Any]], what: str, stall: float = 60.0) -> None:
    """Wait until ``check()`` is true; fail after ``stall`` seconds without a change."""
    patience = Patience(stall)
    while True:
        state = await check()
        if state is True:
            return
        patience.observe(state)
        if patience.expired():
            raise TimeoutError(f"{what}: still {state!r} after {patience.waited():.0f}s")
        await asyncio.sleep(0.05)


def drive(
    processes: Processes,
    workflow: str,
    *args: Any,
    run_id: str,
    count: int | None = None,
    module: str = "dbos_flows",
    **env: str,
) -> Process:
    """Start ``run_id`` (or ``count`` runs ``run_id-i``) in a new process that exits once
    they stop or suspend."""
    extra = [] if count is None else ["--count", str(count)]
    return processes.spawn(
        "-m",
        "dbos_drive",
        "--url",
        processes.url,
        "--module",
        module,
        "--workflow",
        workflow,
        "--run-id",
        run_id,
        "--input",
        json.dumps({"args": list(args), "kwargs": {}}),
        *extra,
        env=env,
    )


async def worker_up(executor_id: str) -> None:
    """Wait until the worker ``executor_id`` beats as a worker of perdure's queue (so a
    delivery of this process leaves the run it wakes to that worker)."""
    import sqlalchemy as sa

    from perdure_dbos._backend import RECOVERY_QUEUE, runtime

    async def beating() -> Any:
        executors = runtime().executors
        t = executors.table
        with executors.engine.connect() as c:
            rows = c.execute(sa.select(t.c.executor_id, t.c.queues)).all()
        queues = {str(r[0]): str(r[1] or "").split() for r in rows}
        return True if RECOVERY_QUEUE in queues.get(executor_id, ()) else queues

    await until(beating, f"worker {executor_id} beats")
