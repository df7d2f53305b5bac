"""Finding 8: one corrupt runs row does not hide the others from ``runs list``.

The row is damaged behind the store's back (SQL on the embedded stores' own tables): a
non-integer ``fence`` (SQLite's columns take any type), ``details`` that is not JSON
(both). The listing shows that run as needing attention, reason ``corrupt``, and every
other run as it is; reading the run itself is a typed ``CorruptHistoryError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import psycopg.sql
import pytest
from typer.testing import CliRunner

import perdure
from perdure import CorruptHistoryError, RunStatus
from perdure._cli import app
from perdure._registry import open_backend
from perdure.testing.plugin import store_factory


@perdure.workflow(name="corrupt_rows.wait")
async def wait_once() -> Any:
    return await perdure.wait_for_signal("go")


def _sqlite_update(url: str, column: str, value: str, run_id: str) -> None:
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, run_id))


def _postgres_update(url: str, column: str, value: str, run_id: str) -> None:
    parts = urlsplit(url)
    schema = parse_qs(parts.query)["schema"][0]
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("UPDATE {}.runs SET {} = %s WHERE run_id = %s").format(
                psycopg.sql.Identifier(schema), psycopg.sql.Identifier(column)
            ),
            (value, run_id),
        )


Damage = Callable[[str, str, str, str], None]
CASES = [
    ("sqlite", "fence", "not-a-number", _sqlite_update),
    ("sqlite", "details", "{not json", _sqlite_update),
    ("sqlite", "created_at", "yesterday", _sqlite_update),
    ("postgresql", "details", "{not json", _postgres_update),
    ("postgresql", "status", "exploded", _postgres_update),
]


async def test_runs_list_shows_a_corrupt_row_and_lists_the_rest(tmp_path: Path) -> None:
    for store, column, value, damage in CASES:
        folder = tmp_path / f"{store}-{column}"
        folder.mkdir()
        with store_factory(store)(folder) as url:
            await _check_listing(url, column, value, damage)


async def _check_listing(url: str, column: str, value: str, damage: Damage) -> None:
    backend = open_backend(url)
    await backend.open()
    try:
        for run_id in ("good-1", "bad", "good-2"):
            await backend.start(wait_once, (), {}, run_id=run_id)
        await backend.idle()
        damage(url, column, value, "bad")
        listed = {r.run_id: r for r in await backend.list_runs()}
        assert set(listed) == {"good-1", "bad", "good-2"}, (url, column)
        assert listed["good-1"].status is RunStatus.SUSPENDED
        assert listed["bad"].status is RunStatus.NEEDS_ATTENTION
        assert listed["bad"].attention is not None
        assert listed["bad"].attention["reason"] == "corrupt"
        assert column in listed["bad"].attention["message"]
        with pytest.raises(CorruptHistoryError, match=f"'bad'.*{column}"):
            await backend.get_run("bad")
    finally:
        await backend.close()
    shown = await asyncio.to_thread(  # the CLI runs its own event loop
        CliRunner().invoke, app, ["runs", "list", "--url", url], env={"COLUMNS": "250"}
    )
    assert shown.exit_code == 0, shown.output
    assert "good-1" in shown.output and "good-2" in shown.output and "bad" in shown.output
