"""A process that starts runs drives them as Temporal starts bare activities: eagerly, the
drive activity handed back in the reply to the workflow task that scheduled it (the
drive activity runs on the worker thread's Temporal worker), so no drive goes through
the task queue's matching. A process that runs drives only (``role=drives``) takes them
from matching: that side shows the server's count sees drives at all. Counted by the
dev server itself: its Prometheus ``task_schedule_to_start_latency`` histogram, which
the history service records for every task a poller starts (by task queue and type;
an eagerly started activity has no poll, so no sample)."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from perdure import RunStatus
from perdure._registry import open_backend
from perdure_temporal import TemporalBackend, TemporalUrl
from perdure_temporal.testing import fresh_url, session_metrics


def polled(task_queue: str, task_type: str) -> float:
    """Tasks of ``task_queue`` that pollers started (sticky and normal partitions)."""
    # The server's reporter writes label values with only [a-zA-Z0-9_]: "t-ab" is "t_ab".
    queue = re.sub(r"[^a-zA-Z0-9_]", "_", task_queue)
    url = f"http://{session_metrics()}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "task_schedule_to_start_latency"
        for sample in family.samples
        if sample.name.endswith("_count")
        and sample.labels.get("taskqueue") == queue
        and sample.labels.get("task_type") == task_type
    )


async def _run_three(starter: TemporalBackend, prefix: str) -> None:
    import temporal_flows

    for i in range(3):
        await starter.start(temporal_flows.big_results, (2, 1), {}, run_id=f"{prefix}{i}")
    for i in range(3):
        info = await starter.wait(f"{prefix}{i}", timeout=60, drive=False)
        assert info.status is RunStatus.SUCCEEDED, info
        assert info.result == 2048


async def test_the_starter_drives_its_runs_eagerly(tmp_path: Path) -> None:
    url = fresh_url(tmp_path)
    queue = TemporalUrl.parse(url).task_queue
    starter = open_backend(url)
    assert isinstance(starter, TemporalBackend)
    try:
        await _run_three(starter, "eager-")
    finally:
        await starter.close()
    # Its workflow tasks went through matching (the counter is read) ...
    assert polled(queue, "Workflow") >= 3
    # ... and not one of its drives did.
    assert polled(queue, "Activity") == 0


async def test_a_drives_only_worker_takes_drives_from_matching(tmp_path: Path) -> None:
    url = fresh_url(tmp_path)
    queue = TemporalUrl.parse(url).task_queue
    starter = open_backend(url + "&role=workflows")
    driver = open_backend(url + "&role=drives")
    assert isinstance(starter, TemporalBackend) and isinstance(driver, TemporalBackend)
    stop = asyncio.Event()
    serving = asyncio.create_task(driver.serve(stop=stop))  # what `perdure worker` runs
    try:
        await _run_three(starter, "matched-")
    finally:
        stop.set()
        await serving
        await starter.close()
        await driver.close()
    assert polled(queue, "Activity") >= 3
