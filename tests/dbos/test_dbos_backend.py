"""DBOS-specific promises: no pickle, recovery across executors, versions, suspension."""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa
from dbos_spawn import drive

import perdure
from perdure import EventKind, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status
from perdure_dbos import DbosUrl
from perdure_dbos.testing import corrupt_step

ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)


def system_rows(url: str) -> list[tuple[str, str, Any]]:
    """Every (table, column, value) in the DBOS system database of ``url``."""
    parsed = DbosUrl.parse(url)
    system = parsed.system_database_url
    if system.startswith("postgresql://"):
        system = "postgresql+psycopg://" + system.removeprefix("postgresql://")
    engine = sa.create_engine(system)
    out: list[tuple[str, str, Any]] = []
    try:
        meta = sa.MetaData(schema=parsed.schema or (None if "sqlite" in system else "dbos"))
        meta.reflect(engine)
        with engine.connect() as conn:
            for table in meta.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    for column, value in row._mapping.items():
                        out.append((table.name, str(column), value))
    finally:
        engine.dispose()
    return out


def is_pickle(value: Any) -> bool:
    if isinstance(value, bytes):
        return value.startswith(b"\x80")
    if not isinstance(value, str) or not value.startswith(("gAS", "gAW", "gAR", "gAN")):
        return False
    try:
        return base64.b64decode(value, validate=True).startswith(b"\x80")
    except (binascii.Error, ValueError):
        return False


async def test_nothing_dbos_stores_for_perdure_runs_is_pickle(
    perdure_backend: Any, perdure_url: str, flows: Any
) -> None:
    handle = await perdure_backend.start(flows.approval, ("p1",), {}, run_id="r-json")
    await perdure_backend.idle()
    await perdure_backend.signal("r-json", perdure.APPROVAL, {"approved": True}, by="ann")
    assert await handle.result(timeout=30) == {"approved": True}
    failed = await perdure_backend.start(flows.failing, ("p2",), {}, run_id="r-json-fail")
    with pytest.raises(perdure.RunFailedError) as failure:
        await failed.result(timeout=30)
    assert failure.value.error["step"] == "2:broken"
    assert failure.value.error["attempts"] == 2

    rows = system_rows(perdure_url)
    tables = {t for t, _, _ in rows}
    assert {"workflow_status", "operation_outputs"} <= tables
    serializations = {v for _, c, v in rows if c == "serialization" and v is not None}
    # DBOS's portable JSON, which its own CLI and API decode; never py_pickle.
    assert serializations == {"portable_json"}, serializations
    pickled = [(t, c) for t, c, v in rows if is_pickle(v)]
    assert pickled == []
    outputs = [v for t, c, v in rows if t == "operation_outputs" and c == "output" and v]
    assert outputs
    for value in outputs:
        json.loads(value)  # every step output is JSON text


async def test_a_suspended_run_resumes_on_another_executor_after_its_process_exits(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    first = drive(processes, "dbos_approval", "7", run_id="r-approval")
    assert first.wait() == 0, first.output()
    info = await perdure_backend.get_run("r-approval")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "approval"
    assert info.attention == {"order": "7"}
    suspended = await perdure_backend.list_runs(statuses=[RunStatus.SUSPENDED])
    assert [r.run_id for r in suspended] == ["r-approval"]
    first_executor = info.owner

    approved = processes.cli("approve", "r-approval", "--by", "alice", "--message", "ok")
    assert approved.returncode == 0, approved.stderr
    processes.worker("dbos_flows")
    info = await wait_for_status(perdure_backend, "r-approval", ENDED)
    assert info.status is RunStatus.SUCCEEDED, info
    assert info.result == {"approved": True, "message": "ok"}
    assert info.owner != first_executor
    assert receiver.applied["lookup"] == 1
    assert receiver.applied["charge"] == 1
    assert receiver.applied["email"] == 1
    received = [
        e
        for e in await perdure_backend.history("r-approval")
        if e.kind is EventKind.SIGNAL_RECEIVED
    ]
    assert [e.data["sent_by"] for e in received] == ["alice"]


async def test_cancelling_a_suspended_run_on_dbos(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    first = drive(processes, "dbos_approval", "9", run_id="r-cancel")
    assert first.wait() == 0, first.output()
    cancelled = processes.cli("cancel", "r-cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    processes.worker("dbos_flows")
    info = await wait_for_status(perdure_backend, "r-cancel", ENDED)
    assert info.status is RunStatus.CANCELLED
    assert receiver.applied["email"] == 0


def test_dbos_urls_parse_and_bad_ones_are_configuration_errors() -> None:
    parsed = DbosUrl.parse("dbos+postgresql://u@h:5432/db?schema=s1&sslmode=disable")
    assert parsed.schema == "s1"
    assert parsed.system_database_url == "postgresql://u@h:5432/db?sslmode=disable"
    assert parse_qs(urlsplit(parsed.system_database_url).query) == {"sslmode": ["disable"]}
    for bad in ("dbos+sqlite:///:memory:", "dbos+mysql://x/y"):
        with pytest.raises(perdure.ConfigurationError):
            perdure._registry.open_backend(bad)
    assert os.environ.get("PERDURE_CODE_VERSION") in (None, "")


async def test_a_corrupt_dbos_step_row_is_named_and_the_run_parks(
    perdure_backend: Any, perdure_url: str, flows: Any
) -> None:
    await perdure_backend.start(flows.approval, ("c",), {}, run_id="r-corrupt")
    await perdure_backend.idle()
    steps = await perdure_backend.history("r-corrupt")
    assert [e.step_key for e in steps if e.kind is EventKind.STEP_COMPLETED] == [
        "1:lookup",
        "2:charge",
    ]
    corrupt_step(perdure_url, "r-corrupt", 1)
    with pytest.raises(perdure.CorruptHistoryError, match=r"r-corrupt.*#1"):
        await perdure_backend.history("r-corrupt")
    await perdure_backend.close()  # this process's drive ends; the next one replays the row
    await perdure_backend.open()
    await perdure_backend.signal("r-corrupt", perdure.APPROVAL, {"approved": True}, by="x")
    info = await perdure_backend.wait("r-corrupt", timeout=30)
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "CorruptHistoryError"


def dbos_cli(url: str, *args: str) -> Any:
    """Run DBOS's own CLI (``dbos workflow ...``) on the run's system database; its JSON."""
    parsed = DbosUrl.parse(url)
    where = ["-s", parsed.system_database_url]
    if parsed.schema:
        where += ["--schema", parsed.schema]
    done = subprocess.run(
        [str(Path(sys.executable).parent / "dbos"), "workflow", *args, *where],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_dbos_own_cli_decodes_a_perdure_run(
    perdure_backend: Any, perdure_url: str, flows: Any
) -> None:
    handle = await perdure_backend.start(flows.approval, ("cli",), {}, run_id="r-cli")
    await perdure_backend.idle()
    await perdure_backend.signal("r-cli", perdure.APPROVAL, {"approved": True}, by="ann")
    assert await handle.result(timeout=30) == {"approved": True}

    listed = dbos_cli(perdure_url, "list", "-n", "perdure_run")
    (run,) = [w for w in listed if w["workflow_id"] == "r-cli"]
    assert run["status"] == "SUCCESS"
    assert run["input"]["args"] == ["dbos_approval", {"args": ["cli"], "kwargs": {}}]
    assert run["output"] == {"status": "succeeded", "result": {"approved": True}}
    assert dbos_cli(perdure_url, "get", "r-cli")["output"] == run["output"]

    steps = dbos_cli(perdure_url, "steps", "r-cli")
    names = [s["function_name"] for s in steps]
    assert names[:2] == ["1:lookup", "2:charge"], names
    lookup = steps[0]["output"]["events"][0]
    assert (lookup["kind"], lookup["data"]["result"]["order"]) == ("step_completed", "cli")
    # One DBOS step per perdure step: no step name is recorded twice.
    completed = [n for n in names if n[:1].isdigit()]
    assert len(completed) == len(set(completed)), names


async def test_list_runs_filters_by_status_workflow_age_and_limit(
    perdure_backend: Any, flows: Any
) -> None:
    for i in range(3):
        await perdure_backend.start(flows.approval, (f"a{i}",), {}, run_id=f"r-list-{i}")
        await perdure_backend.idle()
    failed = await perdure_backend.start(flows.failing, ("f",), {}, run_id="r-list-f")
    with pytest.raises(perdure.RunFailedError):
        await failed.result(timeout=30)

    async def ids(**kw: Any) -> list[str]:
        return [r.run_id for r in await perdure_backend.list_runs(**kw)]

    suspended = ["r-list-2", "r-list-1", "r-list-0"]  # newest first
    assert await ids(statuses=[RunStatus.SUSPENDED]) == suspended
    assert await ids(statuses=[RunStatus.SUSPENDED], limit=2) == suspended[:2]
    assert await ids(statuses=[RunStatus.FAILED]) == ["r-list-f"]
    assert await ids(statuses=[RunStatus.FAILED, RunStatus.SUSPENDED]) == ["r-list-f", *suspended]
    assert await ids(workflow="dbos_failing") == ["r-list-f"]
    assert await ids(workflow="dbos_approval", limit=1) == ["r-list-2"]
    assert await ids(limit=2) == ["r-list-f", "r-list-2"]
    assert await ids(older_than=3600) == []
    assert await ids(statuses=[RunStatus.SUCCEEDED]) == []
