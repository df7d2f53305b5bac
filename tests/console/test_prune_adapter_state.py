"""`perdure runs prune` deletes what the adapters keep for a pruned run, through their
`perdure.retention` hooks: a LangGraph thread's checkpoints (once its last turn goes)
and the `PerdureSession` items a run wrote; the same state of runs that stay is kept.
Counted in the tables themselves, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from typing import Any

import psycopg
import pytest
import retention_workflows as rw
from typer.testing import CliRunner

from perdure._backend import Backend
from perdure._cli.app import app
from perdure._errors import RunNotFoundError
from perdure._records import RunStatus
from perdure._stores.postgres import parse_postgres_url
from perdure._stores.sqlite import parse_sqlite_url
from perdure_langgraph import durable
from perdure_openai_agents import PerdureSession
from perdure_openai_agents.session import TABLE

LG_TABLES = ("lg_checkpoints", "lg_blobs", "lg_writes")


def rows(url: str, table: str, where: str, args: tuple[Any, ...]) -> int:
    """Rows of ``table`` matching ``where`` (``?`` placeholders), read behind perdure."""
    if url.startswith("sqlite:"):
        path, _ = parse_sqlite_url(url)
        with sqlite3.connect(path) as db:
            return int(
                db.execute(f"SELECT count(*) FROM {table} WHERE {where}", args).fetchone()[0]
            )
    conninfo, schema, _ = parse_postgres_url(url)
    with psycopg.connect(conninfo) as conn:
        sql = f'SELECT count(*) FROM "{schema}".{table} WHERE {where.replace("?", "%s")}'
        found = conn.execute(sql.encode(), args).fetchone()
        assert found is not None
        return int(found[0])


def prune(url: str) -> str:
    ran = CliRunner().invoke(
        app, ["runs", "prune", "--older-than", "0s", "--url", url], catch_exceptions=False
    )
    assert ran.exit_code == 0, ran.stderr
    return ran.stdout


async def test_prune_deletes_a_finished_threads_checkpoints_and_keeps_a_waiting_one(
    embedded: Backend, embedded_url: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    done, waiting = f"done-{tag}", f"waiting-{tag}"
    finished = durable(rw.greeting(), url=embedded_url, graph_ref="retention_workflows:greeting")
    asking = durable(rw.asking(), url=embedded_url, graph_ref="retention_workflows:asking")
    try:
        await finished.ainvoke({"log": []}, {"configurable": {"thread_id": done}})
        out = await asking.ainvoke({"log": []}, {"configurable": {"thread_id": waiting}})
        assert "__interrupt__" in out
    finally:
        await finished.aclose()
        await asking.aclose()
    assert (await embedded.get_run(f"{done}#1")).status is RunStatus.SUCCEEDED
    assert (await embedded.get_run(f"{waiting}#1")).status is RunStatus.SUSPENDED
    kept = {t: rows(embedded_url, t, "thread_id = ?", (waiting,)) for t in LG_TABLES}
    assert rows(embedded_url, "lg_checkpoints", "thread_id = ?", (done,)) > 0
    assert kept["lg_checkpoints"] > 0

    await asyncio.to_thread(prune, embedded_url)  # the CLI runs its own event loop

    with pytest.raises(RunNotFoundError):
        await embedded.get_run(f"{done}#1")
    for table in LG_TABLES:
        assert rows(embedded_url, table, "thread_id = ?", (done,)) == 0, table
        assert rows(embedded_url, table, "thread_id = ?", (waiting,)) == kept[table], table
    assert (await embedded.get_run(f"{waiting}#1")).status is RunStatus.SUSPENDED


async def test_prune_deletes_the_session_items_a_pruned_run_wrote(
    embedded: Backend, embedded_url: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    sid = f"chat-{tag}"
    # a run id with LIKE's wildcards: the purge compares prefixes, never patterns
    old, live = f"old_%-{tag}", f"old_-{tag}-live"
    await embedded.start(rw.chat, (sid, "old words", False), {}, run_id=old)
    await embedded.start(rw.chat, (sid, "live words", True), {}, run_id=live)
    await embedded.idle()
    assert (await embedded.wait(old, timeout=60)).status is RunStatus.SUCCEEDED
    assert (await embedded.get_run(live)).status is RunStatus.SUSPENDED
    outside = PerdureSession(sid, url=embedded_url)
    await outside.add_items([{"role": "user", "content": "outside any run"}])
    assert rows(embedded_url, TABLE, "session_id = ?", (sid,)) == 3

    await asyncio.to_thread(prune, embedded_url)  # the CLI runs its own event loop

    with_prefix = "substr(write_key, 1, ?) = ?"
    assert rows(embedded_url, TABLE, with_prefix, (len(old) + 1, f"{old}:")) == 0
    assert rows(embedded_url, TABLE, with_prefix, (len(live) + 1, f"{live}:")) == 1
    items = await PerdureSession(sid, url=embedded_url).get_items()
    assert [i["content"] for i in items] == ["live words", "outside any run"]  # pyright: ignore[reportTypedDictNotRequiredAccess, reportGeneralTypeIssues]
