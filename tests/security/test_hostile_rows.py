"""Finding 2 on every store: a row planted through the substrate itself, whose type tag
names a module (the audit's ``venv.__main__``, whose import creates a virtualenv and
raises ``SystemExit``), imports nothing and builds nothing.

The row is written behind perdure's back, where each substrate keeps the value a drive
decodes: the result of step 1 in the embedded stores' ``events`` table and in DBOS's
``operation_outputs``; on Temporal, whose history perdure cannot rewrite (and whose
stored-aside values are verified by hash), a signal sent with Temporal's own client.
The run it reaches stops with a typed ``SerializationError`` naming the type, and the
process that drove it goes on driving another run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import psycopg.sql
import pytest

import perdure
from perdure import RunStatus
from perdure._serialization import TAG

HOSTILE = {TAG: "dataclass", "t": "venv.__main__:X", "v": {}}


@perdure.step
async def fetch() -> dict[str, int]:
    return {"n": 1}


@perdure.workflow(name="security.hostile_rows")
async def fetch_then_wait() -> Any:
    fetched = await fetch()
    go = await perdure.wait_for_signal("go")
    return [fetched, go]


def _hostile_result(data: str) -> str:
    record = json.loads(data)
    record["result"] = HOSTILE
    return json.dumps(record)


def _plant_sqlite(url: str, run_id: str) -> None:
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        where = "run_id = ? AND kind = 'step_completed'"
        (data,) = conn.execute(f"SELECT data FROM events WHERE {where}", (run_id,)).fetchone()
        conn.execute(f"UPDATE events SET data = ? WHERE {where}", (_hostile_result(data), run_id))


def _plant_postgresql(url: str, run_id: str) -> None:
    parts = urlsplit(url)
    table = psycopg.sql.Identifier(parse_qs(parts.query)["schema"][0], "events")
    where = psycopg.sql.SQL("run_id = %s AND kind = 'step_completed'")
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as conn:
        select = psycopg.sql.SQL("SELECT data::text FROM {} WHERE {}").format(table, where)
        row = conn.execute(select, (run_id,)).fetchone()
        assert row is not None
        update = psycopg.sql.SQL("UPDATE {} SET data = %s WHERE {}").format(table, where)
        conn.execute(update, (_hostile_result(row[0]), run_id))


def _plant_dbos(url: str, run_id: str) -> None:
    import sqlalchemy as sa

    from perdure_dbos import DbosUrl

    parsed = DbosUrl.parse(url)
    system, schema = parsed.system_database_url, parsed.schema
    if system.startswith("postgresql://"):
        system = "postgresql+psycopg://" + system.removeprefix("postgresql://")
        schema = schema or "dbos"
    engine = sa.create_engine(system)
    try:
        steps = sa.Table("operation_outputs", sa.MetaData(schema=schema), autoload_with=engine)
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(steps.c.function_id, steps.c.output).where(
                    steps.c.workflow_uuid == run_id
                )
            ).all()
            for function_id, output in rows:
                record = json.loads(output) if output else None
                events = record.get("events") if isinstance(record, dict) else None
                completed = [e for e in events or [] if e["kind"] == "step_completed"]
                if completed:
                    completed[0]["data"]["result"] = HOSTILE
                    conn.execute(
                        sa.update(steps)
                        .where(steps.c.workflow_uuid == run_id, steps.c.function_id == function_id)
                        .values(output=json.dumps(record))
                    )
                    return
    finally:
        engine.dispose()
    raise LookupError(f"no DBOS step of {run_id!r} records a completed step")


def _plant_temporal(url: str, run_id: str) -> None:
    import asyncio

    from temporalio.client import Client

    from perdure_temporal.url import TemporalUrl

    config = TemporalUrl.parse(url)
    signal = {
        "name": "go",
        "payload": HOSTILE,
        "payload_ref": None,
        "sent_by": "mallory",
        "sent_at": time.time(),
        "decision": None,
    }

    async def send() -> None:
        client = await Client.connect(config.target, namespace=config.namespace)
        handle = client.get_workflow_handle(f"{config.id_prefix}{run_id}")
        await handle.execute_update("deliver", signal, id=f"hostile-{time.time_ns()}")

    # On a loop of its own: the test's loop is the one the backend's worker runs on.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, send()).result()


PLANTERS: dict[str, Callable[[str, str], None]] = {
    "sqlite": _plant_sqlite,
    "postgresql": _plant_postgresql,
    "dbos+sqlite": _plant_dbos,
    "dbos+postgresql": _plant_dbos,
    "temporal": _plant_temporal,
}


async def test_a_planted_row_naming_a_module_imports_nothing_and_the_worker_lives_on(
    perdure_backend: Any,
    perdure_store: str,
    perdure_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workdir = tmp_path / "cwd"  # where importing venv.__main__ would create a virtualenv
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    for run_id in ("hostile", "bystander"):
        await perdure_backend.start(fetch_then_wait, (), {}, run_id=run_id)
    await perdure_backend.idle()
    PLANTERS[perdure_store](perdure_url, "hostile")
    if perdure_store != "temporal":  # there the planted signal is what wakes it
        await perdure_backend.signal("hostile", "go", "now")

    info = await perdure_backend.wait("hostile", timeout=120)
    assert info.status in (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED), info
    said = json.dumps(info.attention if info.status is RunStatus.NEEDS_ATTENTION else info.error)
    assert "SerializationError" in said and "venv.__main__:X" in said, said
    assert "is not registered" in said, said
    assert "venv.__main__" not in sys.modules
    assert list(workdir.iterdir()) == []

    await perdure_backend.signal("bystander", "go", "fine")  # the same process drives on
    done = await perdure_backend.wait("bystander", timeout=120)
    assert done.status is RunStatus.SUCCEEDED and done.result == [{"n": 1}, "fine"]
