"""``perdure worker --queue NAME --concurrency N --rate R`` on Temporal: the worker polls
task queue NAME (as ``task_queue=`` in the URL would), drives N runs at a time and asks
the server to start at most R activities per second on the queue (an LLM's rate limit)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from perdure import RunStatus
from perdure._registry import open_backend
from perdure.testing import Patience
from perdure_temporal import TemporalBackend, TemporalUrl
from perdure_temporal.testing import fresh_url
from perdure_temporal.url import with_task_queue


async def test_queue_concurrency_and_rate_reach_the_temporal_worker(tmp_path: Path) -> None:
    import temporal_flows

    url = fresh_url(tmp_path)
    queue = f"llm-{TemporalUrl.parse(url).task_queue}"
    # The starter runs no drives; the worker's URL names another task queue than its.
    starter = open_backend(with_task_queue(url, queue) + "&role=workflows")
    worker = open_backend(url)
    assert isinstance(starter, TemporalBackend) and isinstance(worker, TemporalBackend)
    await starter.open()
    await worker.open()
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop=stop, concurrency=3, queue=queue, rate=2.5))
    try:
        patience = Patience(30)
        while worker.drive_worker is None:
            assert not serving.done(), serving.exception()
            assert not patience.expired(), "the drive worker did not start"
            await asyncio.sleep(0.05)  # the poll's pace; Patience ends it on a stall
        config = worker.drive_worker.config()
        assert config["task_queue"] == queue
        assert config["max_concurrent_activities"] == 3
        assert config["max_task_queue_activities_per_second"] == 2.5
        assert config["max_activities_per_second"] == 2.5

        # The run starts on the queue; only the worker serving it drives it.
        await starter.start(temporal_flows.big_results, (1, 1), {}, run_id="queued")
        info = await starter.wait("queued", timeout=60, drive=False)
        assert info.status is RunStatus.SUCCEEDED
        assert info.result == 1024
    finally:
        stop.set()
        await serving
        await worker.close()
        await starter.close()
