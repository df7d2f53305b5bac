"""``perdure replay`` on Temporal also runs Temporal's ``Replayer`` over the run's
execution with this code's ``perdure.run`` workflow, and reports what it refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client, WorkflowHistory
from typer.testing import CliRunner

from perdure._cli import app
from perdure._registry import open_backend
from perdure_temporal import TemporalUrl
from perdure_temporal.testing import fresh_url
from perdure_temporal.worker import replay_failure


async def test_a_recorded_execution_replays_and_a_changed_one_is_refused(
    tmp_path: Path,
) -> None:
    import temporal_flows

    url = fresh_url(tmp_path)
    config = TemporalUrl.parse(url)
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(temporal_flows.waits, (), {}, run_id="replayed")
        await backend.idle()
        assert await backend.check_substrate_replay("replayed") is None
    finally:
        await backend.close()

    shown = await asyncio.to_thread(
        CliRunner().invoke, app, ["replay", "temporal_flows", "--run", "replayed", "--url", url]
    )
    assert shown.exit_code == 0, shown.output
    assert "matches" in shown.output

    # The same execution as if the code had scheduled another activity there.
    client = await Client.connect(config.target, namespace=config.namespace)
    history = await client.get_workflow_handle(f"{config.id_prefix}replayed").fetch_history()
    events = list(history.events)
    [scheduled] = [e for e in events if e.HasField("activity_task_scheduled_event_attributes")]
    scheduled.activity_task_scheduled_event_attributes.activity_type.name = "another.activity"
    changed = WorkflowHistory(history.workflow_id, events)
    problem = await replay_failure(changed, client.data_converter)
    assert problem is not None
    assert "Replayer" in problem and "another.activity" in problem
