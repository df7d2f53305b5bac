"""What a Temporal user sees of a perdure run: ``temporal workflow show`` and the UI read as
its story. Each drive activity's summary names the run's workflow, why the drive was
scheduled and the last step recorded before it; the timer's summary says when the run
wakes; the workflow's current details name the last step recorded and what it waits for."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle

from perdure import RunStatus
from perdure.testing import Patience
from perdure_temporal import TemporalBackend, TemporalUrl


async def _summaries(client: Client, handle: WorkflowHandle[Any, Any]) -> dict[str, list[str]]:
    """The user-metadata summaries of the execution's activities and timers, in order."""
    convert = client.data_converter.payload_converter
    out: dict[str, list[str]] = {"activities": [], "timers": []}
    async for event in handle.fetch_history_events():
        if not event.user_metadata.HasField("summary"):
            continue
        text = convert.from_payload(event.user_metadata.summary, str)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            out["activities"].append(text)
        elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            out["timers"].append(text)
    return out


async def _until_waiting_for(backend: TemporalBackend, run_id: str, name: str) -> None:
    """Poll the run's record (past its timer) until it waits for the signal ``name``."""
    patience = Patience(30)
    while (info := await backend.get_run(run_id)).waiting_for != name:
        patience.observe((info.status, info.wake_at))
        assert not patience.expired(), f"run {run_id} stalled as {info.status} {info.wake_at}"
        await asyncio.sleep(0.05)  # the poll's pace; Patience ends it on a stall


async def _details(handle: WorkflowHandle[Any, Any]) -> str:
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def test_temporal_history_tells_the_runs_drives_timer_and_steps(
    backend: TemporalBackend,
) -> None:
    import temporal_flows

    config = TemporalUrl.parse(backend.url)
    client = backend.client
    handle = client.get_workflow_handle(f"{config.id_prefix}told")
    await backend.start(temporal_flows.story, (), {}, run_id="told")
    await _until_waiting_for(backend, "told", "go")
    steps = [e.step_key for e in await backend.history("told") if e.step_key]
    slept = steps[1]
    assert slept.endswith(":sleep")

    told = await _summaries(client, handle)
    assert told["activities"] == [
        "drive 1 of temporal_story: start",
        f"drive 2 of temporal_story: timer, after {slept}",
    ]
    assert len(told["timers"]) == 1
    assert told["timers"][0].startswith("temporal_story wakes at ")
    details = await _details(handle)
    assert details.splitlines()[0] == "perdure run of temporal_story: suspended"
    assert "waits for signal 'go'" in details
    assert "last step recorded: " in details

    await backend.signal("told", "go", {"ok": True})
    assert (await backend.wait("told", timeout=60)).status is RunStatus.SUCCEEDED
    third = (await _summaries(client, handle))["activities"][2]
    assert third.startswith("drive 3 of temporal_story: signal 'go', after ")
    last = [e.step_key for e in await backend.history("told") if e.step_key][-1]
    assert last.endswith(":note")
    assert f"last step recorded: {last}" in await _details(handle)
