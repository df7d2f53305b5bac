"""Payloads stored aside in PostgreSQL, shared by every worker host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from temporal_cli_support import perdure_cli

import perdure
from perdure import RunStatus
from perdure._registry import open_backend
from perdure.testing.plugin import postgresql_url
from perdure_temporal.pg_payloads import PostgresPayloads
from perdure_temporal.testing import fresh_url


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    with postgresql_url(tmp_path) as url:
        yield url


def _tamper(pg: str) -> int:
    store = PostgresPayloads(pg)
    with psycopg.connect(pg.split("?")[0], autocommit=True) as conn:
        cur = conn.execute(
            sql.SQL("UPDATE {}.payloads SET data = %s").format(sql.Identifier(store.schema)),
            (b'"TAMPERED"',),
        )
        return cur.rowcount


async def test_a_run_keeps_its_values_in_postgresql_and_a_changed_row_is_refused(
    pg: str, tmp_path: Path, flows: Any
) -> None:
    url = fresh_url(tmp_path, payload_threshold=0, payloads=quote(pg, safe=""))
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(flows.big_results, (3, 4), {}, run_id="pg-aside")
        info = await backend.wait("pg-aside", timeout=60)
        assert info.status is RunStatus.SUCCEEDED and info.result == 3 * 4 * 1024
        assert not (tmp_path / "payloads").exists()  # nothing went to a directory
        steps = [
            e
            for e in await backend.history("pg-aside")
            if e.kind is perdure.EventKind.STEP_COMPLETED
        ]
        assert [len(e.data["result"]) for e in steps] == [4096] * 3

        assert _tamper(pg) > 0
        with pytest.raises(perdure.CorruptHistoryError, match="changed after it was written"):
            await backend.history("pg-aside")
    finally:
        await backend.close()


def test_prune_deletes_only_payloads_written_before_the_retention(pg: str) -> None:
    store = PostgresPayloads(pg)
    try:
        old = store.put(b"old")
        assert store.get(old) == b"old"
        assert store.prune(older_than=3600) == 0
        assert store.prune(older_than=0) == 1
        with pytest.raises(KeyError):
            store.get(old)
    finally:
        store.close()


def test_perdure_temporal_prune_payloads_deletes_the_old_rows_of_the_urls_store(
    pg: str, tmp_path: Path
) -> None:
    store = PostgresPayloads(pg)
    try:
        old = store.put(b"old")
    finally:
        store.close()
    url = fresh_url(tmp_path, payloads=quote(pg, safe=""))
    kept = perdure_cli("temporal", "prune-payloads", "--older-than", "1h", "--url", url)
    assert kept.returncode == 0, kept.stderr
    assert "deleted 0 payload(s)" in kept.stdout
    pruned = perdure_cli("temporal", "prune-payloads", "--older-than", "0s", "--url", url)
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted 1 payload(s)" in pruned.stdout
    store = PostgresPayloads(pg)
    try:
        with pytest.raises(KeyError):
            store.get(old)
    finally:
        store.close()


def test_prune_payloads_of_a_directory_store_is_refused_naming_it(tmp_path: Path) -> None:
    url = fresh_url(tmp_path)
    shown = perdure_cli("temporal", "prune-payloads", "--older-than", "30d", "--url", url)
    assert shown.returncode != 0
    assert "prune-payloads cleans a payloads=postgresql" in shown.stderr
