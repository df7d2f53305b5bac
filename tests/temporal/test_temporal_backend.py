"""What is particular to the Temporal backend: its URL, payloads stored aside, its
history read from Temporal's own, and Temporal-side cancellation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

import perdure
from perdure import RunStatus
from perdure._cli import app
from perdure._registry import open_backend
from perdure._retention import export_name
from perdure_temporal import TemporalBackend, TemporalUrl
from perdure_temporal.testing import fresh_url


async def _history_bytes(url: str, run_id: str) -> int:
    config = TemporalUrl.parse(url)
    client = await Client.connect(config.target, namespace=config.namespace)
    handle = client.get_workflow_handle(f"{config.id_prefix}{run_id}")
    return sum([e.ByteSize() async for e in handle.fetch_history_events()])


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("temporal:///default", "no host"),
        ("temporal://h:7233/default?task_queue=a'b", "bad task_queue"),
        ("temporal://h:7233/default?payload_threshold=-1", "payload_threshold"),
        ("temporal://h:7233/default?tls_version=1", "unknown parameter"),
        ("temporal://h:7233/default?tls=maybe", "tls must be"),
        ("temporal://h:7233/default?heartbeat_timeout=-1", "heartbeat_timeout"),
    ],
)
def test_a_bad_temporal_url_is_a_configuration_error_naming_the_part(bad: str, match: str) -> None:
    with pytest.raises(perdure.ConfigurationError, match=match):
        open_backend(bad)


async def test_an_unreachable_server_is_backend_unavailable_naming_it() -> None:
    backend = open_backend("temporal://127.0.0.1:1/default")
    with pytest.raises(perdure.BackendUnavailableError, match=r"127\.0\.0\.1:1"):
        await backend.open()


async def test_large_step_results_are_stored_aside_and_history_grows_by_references(
    backend: TemporalBackend, url: str, flows: Any, tmp_path: Path
) -> None:
    small = await backend.start(flows.big_results, (2, 64), {}, run_id="two")
    assert await small.result() == 2 * 64 * 1024
    large = await backend.start(flows.big_results, (20, 64), {}, run_id="twenty")
    assert await large.result() == 20 * 64 * 1024

    two, twenty = await _history_bytes(url, "two"), await _history_bytes(url, "twenty")
    # 18 more 64 KiB results, but only 18 more references (well under 2 KiB each).
    assert twenty - two < 18 * 2048, (two, twenty)
    stored = list((tmp_path / "payloads").rglob("*"))
    assert any(p.is_file() and p.stat().st_size > 64 * 1024 for p in stored)
    history = await backend.history("twenty")
    results = [e.data for e in history if e.kind is perdure.EventKind.STEP_COMPLETED]
    assert len(results) == 20 and all(len(r["result"]) == 64 * 1024 for r in results)


async def test_cancelling_the_workflow_in_temporal_cancels_the_run(
    backend: TemporalBackend, url: str, flows: Any
) -> None:
    await backend.start(flows.waits, (), {}, run_id="to-cancel")
    await backend.idle()
    assert (await backend.get_run("to-cancel")).status is RunStatus.SUSPENDED
    config = TemporalUrl.parse(url)
    client = await Client.connect(config.target, namespace=config.namespace)
    await client.get_workflow_handle(f"{config.id_prefix}to-cancel").cancel()

    info = await backend.wait("to-cancel", timeout=60)
    assert info.status is RunStatus.CANCELLED
    assert info.cancel_requested


async def test_a_wait_that_times_out_leaves_no_entry_for_its_run_in_the_drives(
    backend: TemporalBackend, flows: Any
) -> None:
    await backend.start(flows.waits, (), {}, run_id="waited")
    await backend.idle()
    with pytest.raises(TimeoutError):
        await backend.wait("waited", timeout=0.5)
    drives = backend._drives  # pyright: ignore[reportPrivateUsage]
    assert drives is not None
    # the CancelledError a drive here could raise for a waiter: nobody waits any more
    assert "waited" not in drives._raised  # pyright: ignore[reportPrivateUsage]
    await backend.signal("waited", perdure.APPROVAL, {"ok": 1}, by="ann")
    assert (await backend.wait("waited", timeout=60)).status is RunStatus.SUCCEEDED


async def test_a_finished_run_is_read_from_its_closed_workflow(
    backend: TemporalBackend, url: str, flows: Any
) -> None:
    await backend.start(flows.waits, (), {}, run_id="done")
    await backend.idle()
    await backend.signal("done", perdure.APPROVAL, {"ok": 1}, by="ann")
    assert (await backend.wait("done", timeout=60)).status is RunStatus.SUCCEEDED

    other = open_backend(url)  # a process that never ran the workflow
    await other.open()
    try:
        info = await other.get_run("done")
        assert info.result == {"ok": 1}
        kinds = [e.kind for e in await other.history("done")]
        assert kinds[0] is perdure.EventKind.RUN_STARTED
        assert kinds[-1] is perdure.EventKind.RUN_SUCCEEDED
        with pytest.raises(perdure.InvalidRunStateError):
            await other.signal("done", perdure.APPROVAL, {"ok": 2}, by="ann")
    finally:
        await other.close()


async def test_a_long_run_continues_as_new_and_keeps_one_history(
    flows: Any, tmp_path: Path
) -> None:
    url = fresh_url(tmp_path, history_limit=40)
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(flows.long, (20,), {}, run_id="long")
        await backend.idle()
        assert (await backend.get_run("long")).waiting_for == perdure.APPROVAL
        await backend.signal("long", perdure.APPROVAL, {"ok": True}, by="ann")
        info = await backend.wait("long", timeout=120)
        assert info.status is RunStatus.SUCCEEDED and info.result == {"ok": True}

        history = await backend.history("long")
        assert [e.seq for e in history] == list(range(len(history)))
        steps = [e.data["result"] for e in history if e.kind is perdure.EventKind.STEP_COMPLETED]
        assert steps == [f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)]
        assert [e.kind for e in history].count(perdure.EventKind.SIGNAL_RECEIVED) == 1

        config = TemporalUrl.parse(url)
        client = await Client.connect(config.target, namespace=config.namespace)
        desc = await client.get_workflow_handle(f"{config.id_prefix}long").describe()
        assert desc.run_id != desc.raw_description.workflow_execution_info.first_run_id
    finally:
        await backend.close()


async def test_runs_list_shows_a_corrupt_run_record_and_lists_the_rest(
    backend: TemporalBackend, flows: Any, url: str
) -> None:
    """A ``perdure.run`` workflow whose memo is not a readable run record (written by
    something else, or damaged) is listed as needing attention, reason ``corrupt``."""
    for run_id in ("good-1", "good-2"):
        await backend.start(flows.waits, (), {}, run_id=run_id)
    await backend.idle()
    config = TemporalUrl.parse(url)
    client = await Client.connect(config.target, namespace=config.namespace)
    bad = await client.start_workflow(
        "perdure.run",
        {"not": "a start"},
        id=f"{config.id_prefix}bad",
        task_queue=config.task_queue,
        memo={"perdure": {"run_id": "bad", "status": "exploded"}},
    )
    await bad.terminate("test: a damaged record, kept as it is")

    listed = {r.run_id: r for r in await backend.list_runs()}
    assert set(listed) == {"good-1", "good-2", "bad"}
    assert listed["good-1"].status is RunStatus.SUSPENDED
    assert listed["bad"].status is RunStatus.NEEDS_ATTENTION
    assert listed["bad"].attention is not None
    assert listed["bad"].attention["reason"] == "corrupt"
    assert "exploded" in listed["bad"].attention["message"]
    with pytest.raises(perdure.CorruptHistoryError, match=r"'bad'.*exploded"):
        await backend.get_run("bad")

    shown = await asyncio.to_thread(  # the CLI runs its own event loop
        CliRunner().invoke, app, ["runs", "list", "--url", url], env={"COLUMNS": "250"}
    )
    assert shown.exit_code == 0, shown.output
    assert all(run_id in shown.output for run_id in ("good-1", "good-2", "bad"))


async def test_runs_prune_deletes_finished_runs_from_temporal(flows: Any, tmp_path: Path) -> None:
    """Every execution of a finished run goes (this one continued as new), after its
    export; a waiting run stays."""
    url = fresh_url(tmp_path, history_limit=50)
    backend = open_backend(url)
    await backend.open()
    try:
        await _prune_one(backend, flows, url, tmp_path)
    finally:
        await backend.close()


async def _prune_one(backend: Any, flows: Any, url: str, tmp_path: Path) -> None:
    await backend.start(flows.long, (20,), {}, run_id="done")
    await backend.start(flows.waits, (), {}, run_id="waiting")
    await backend.idle()
    await backend.signal("done", perdure.APPROVAL, {"approved": True}, by="ann")
    assert (await backend.wait("done", timeout=120)).status is RunStatus.SUCCEEDED
    history = await backend.history("done")
    config = TemporalUrl.parse(url)
    client = await Client.connect(config.target, namespace=config.namespace)
    executions = [
        wf async for wf in client.list_workflows(f"WorkflowId = '{config.id_prefix}done'")
    ]
    assert len(executions) > 1

    folder = tmp_path / "exported"
    pruned = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["runs", "prune", "--older-than", "0s", "--export", str(folder), "--url", url],
    )
    assert pruned.exit_code == 0, pruned.output
    assert "deleted 1 of 1" in pruned.output
    lines = (folder / export_name("done")).read_text().splitlines()
    assert [json.loads(line) for line in lines[1:]] == [ev.to_json() for ev in history]
    with pytest.raises(perdure.RunNotFoundError):
        await backend.get_run("done")
    with pytest.raises(perdure.RunNotFoundError):
        await backend.history("done")
    assert (await backend.get_run("waiting")).status is RunStatus.SUSPENDED
