"""perdure's code version is Temporal Worker Versioning: a run started by code version v1
is pinned to v1 of the task queue's deployment, so its drives go only to v1 workers even
while a v2 worker polls the same task queue (and takes the runs v2 starts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from perdure import RunStatus
from perdure._registry import open_backend
from perdure_temporal import TemporalBackend
from perdure_temporal.testing import fresh_url


@pytest.fixture
async def opened(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """Opens a backend as code version ``version`` (``PERDURE_CODE_VERSION``); closes all."""
    backends: list[TemporalBackend] = []

    async def open_as(url: str, version: str) -> TemporalBackend:
        monkeypatch.setenv("PERDURE_CODE_VERSION", version)
        backend = open_backend(url)
        assert isinstance(backend, TemporalBackend)
        await backend.open()
        backends.append(backend)
        return backend

    yield open_as
    for backend in reversed(backends):
        await backend.close()


async def _drive_build_ids(backend: TemporalBackend, run_id: str) -> list[str]:
    """The build id of the worker that started each drive attempt of the run."""
    handle = backend.client.get_workflow_handle(backend.workflow_id(run_id))
    return [
        e.activity_task_started_event_attributes.worker_version.build_id
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]


async def _first_drive_scheduled(backend: TemporalBackend, run_id: str) -> None:
    handle = backend.client.get_workflow_handle(backend.workflow_id(run_id))
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            return


async def test_a_run_is_driven_only_by_workers_of_the_code_version_it_started_on(
    opened: Any, tmp_path: Path
) -> None:
    url = fresh_url(tmp_path)
    new = await opened(url, "v2")
    stop = asyncio.Event()
    serving = asyncio.create_task(new.serve(stop=stop))  # a v2 `perdure worker`
    try:
        await _versioned_run_of_each(opened, url, new)
    finally:
        stop.set()
        await serving


async def _versioned_run_of_each(opened: Any, url: str, new: TemporalBackend) -> None:
    """A v1 run, driven by v1 although v2 polls first; then a v2 run, driven by v2."""
    import temporal_flows

    old = await opened(url + "&role=workflows", "v1")  # v1's starter: no drives
    await old.start(temporal_flows.big_results, (1, 1), {}, run_id="old")
    # The drive is on the task queue, where only the v2 worker takes drives.
    await _first_drive_scheduled(old, "old")
    v1 = await opened(url + "&role=drives", "v1")  # now a v1 worker drives it
    assert (await v1.wait("old", timeout=60)).status is RunStatus.SUCCEEDED
    assert set(await _drive_build_ids(old, "old")) == {"v1"}
    described = await old.client.get_workflow_handle(old.workflow_id("old")).describe()
    pin = described.raw_description.workflow_execution_info.versioning_info
    assert pin.deployment_version.build_id == "v1"

    await new.start(temporal_flows.big_results, (1, 1), {}, run_id="new")
    assert (await new.wait("new", timeout=60)).status is RunStatus.SUCCEEDED
    assert set(await _drive_build_ids(new, "new")) == {"v2"}
