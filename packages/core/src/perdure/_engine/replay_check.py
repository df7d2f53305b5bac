"""Check recorded histories against the code about to be deployed.

``check_replay`` replays a copy of a run in memory with the current workflow code and
stops before the first step the history does not record, so nothing runs and nothing is
written to the run's store. A changed step at a recorded position is reported with the
``DeterminismError`` a worker would park the run with.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from dataclasses import dataclass

from perdure._engine.backend import EmbeddedBackend
from perdure._engine.driver import RunDriver
from perdure._engine.replay import ReplayEnd
from perdure._records import Event, EventKind, RunInfo, RunStatus
from perdure._stores.memory import MemoryStore
from perdure._workflow import get_workflow


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What replaying one run with the current code showed."""

    run_id: str
    workflow: str
    ok: bool
    recorded_steps: int
    #: The first step the code would run next (not in the history), if it got there.
    next_step: str | None = None
    #: Why the history and the code disagree, when they do.
    error: str | None = None
    step_key: str | None = None


async def check_replay(info: RunInfo, history: list[Event]) -> ReplayReport:
    """Replay ``info``'s run from ``history`` with the workflow code registered now."""
    workflow = get_workflow(info.workflow)
    recorded = sum(1 for e in history if e.kind is EventKind.STEP_COMPLETED)
    copy = RunInfo(
        run_id=info.run_id,
        workflow=info.workflow,
        status=RunStatus.PENDING,
        input=info.input,
        created_at=info.created_at,
        updated_at=info.updated_at,
        code_version=info.code_version,
        parent_run_id=info.parent_run_id,
    )
    store = MemoryStore("memory://replay-check")
    store.load(copy, history)
    backend = EmbeddedBackend(store, replay_only=True)
    lease = await store.acquire(info.run_id, backend.owner, 3600.0, now=time.time())
    assert lease is not None
    driver = RunDriver(backend, lease, workflow)
    task = asyncio.get_running_loop().create_task(driver.drive(), context=contextvars.Context())
    try:
        await task
    except ReplayEnd as end:
        return ReplayReport(info.run_id, info.workflow, True, recorded, next_step=end.step_key)
    after = await store.get_run(info.run_id)
    attention = after.attention or {}
    if after.status is RunStatus.NEEDS_ATTENTION and attention.get("reason") == "determinism":
        return ReplayReport(
            info.run_id,
            info.workflow,
            False,
            recorded,
            error=str(attention.get("message")),
            step_key=attention.get("step_key"),
        )
    return ReplayReport(info.run_id, info.workflow, True, recorded)
