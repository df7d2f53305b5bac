"""``perdure worker --queue NAME --concurrency N --rate R`` is a worker of DBOS's queue.

A workflow declared with ``queue=`` is enqueued there when started (the starting
process does not drive it) and DBOS dequeues it into a worker of that queue within the
queue's limits. One at a time is seen in DBOS's own statuses and the receiver: the
second run is dequeued only once the first ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from perdure import ConfigurationError, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

RUNS = ["q-0", "q-1", "q-2"]


async def _dbos_statuses(backend: Any) -> list[str]:
    return [(await backend.get_run(r)).details["dbos"]["status"] for r in RUNS]


async def test_a_queue_with_worker_concurrency_one_runs_its_runs_one_at_a_time(
    perdure_backend: Any, receiver: Receiver, processes: Processes, flows: Any
) -> None:
    for run_id in RUNS:
        await perdure_backend.start(flows.queued, (run_id,), {}, run_id=run_id)
    # Enqueued, not driven by the process that started them.
    assert await _dbos_statuses(perdure_backend) == ["ENQUEUED"] * 3
    first = receiver.hold("enter", "after")
    processes.spawn(
        "-m", "perdure", "worker", "dbos_flows", "--url", processes.url,
        "--queue", "serial", "--concurrency", "1", "--rate", "6000/m",
    )  # fmt: skip
    receiver.wait_held(first)
    # DBOS's first dequeue took one run, though three were there to take.
    statuses = await _dbos_statuses(perdure_backend)
    assert sorted(statuses) == ["ENQUEUED", "ENQUEUED", "PENDING"], statuses
    for done in range(1, 3):
        following = receiver.hold("enter", "after")
        first.release.set()
        receiver.wait_held(following)
        # The next run entered only once the one before had ended.
        statuses = await _dbos_statuses(perdure_backend)
        assert sorted(statuses) == sorted(
            ["SUCCESS"] * done + ["PENDING"] + ["ENQUEUED"] * (2 - done)
        ), statuses
        first = following
    first.release.set()
    for run_id in RUNS:
        info = await wait_for_status(perdure_backend, run_id, (RunStatus.SUCCEEDED,))
        assert info.owner != perdure_backend.executor_id
    assert receiver.requests["enter"] == 3


async def test_rate_needs_a_queue_and_a_reserved_name_is_refused(perdure_backend: Any) -> None:
    stop = asyncio.Event()
    with pytest.raises(ConfigurationError, match="--queue"):
        await perdure_backend.serve(stop=stop, rate=1.0)
    with pytest.raises(ConfigurationError, match="taken"):
        await perdure_backend.serve(stop=stop, queue="perdure")
