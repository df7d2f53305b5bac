"""Our fixture for LangGraph's own test suite (``nox -s langgraph_suite``).

``nox -s langgraph_suite`` downloads the sdist of the installed LangGraph, appends
``from perdure_suite import *`` to its ``tests/conftest.py`` and loads this module with
``-p perdure_suite``. The checkpointer fixtures of LangGraph's suite then run every test
on LangGraph's ``SqliteSaver`` (the baseline) and on ``PerdureSaver`` on SQLite (a file)
and on PostgreSQL (a fresh schema per test, dropped after it). Each outcome is written to
``$PERDURE_SUITE_REPORT`` (JSON Lines) for the paired counts.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from perdure_langgraph import PerdureSaver

__all__ = ["async_checkpointer", "sync_checkpointer"]

BASELINE = "SqliteSaver"
OURS = ("PerdureSaverSqlite", "PerdureSaverPostgres")
POSTGRES = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@contextmanager
def _perdure(kind: str) -> Iterator[PerdureSaver]:
    if kind == "PerdureSaverSqlite":
        with (
            tempfile.TemporaryDirectory(prefix="perdure-suite-") as folder,
            PerdureSaver.from_url(f"sqlite:///{Path(folder) / 'checkpoints.db'}") as saver,
        ):
            yield saver
        return
    schema = f"lg_suite_{secrets.token_hex(6)}"
    try:
        with PerdureSaver.from_url(f"{POSTGRES}?schema={schema}") as saver:
            yield saver
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


@pytest.fixture(scope="function", params=[BASELINE, *OURS])
def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == BASELINE:
        with SqliteSaver.from_conn_string(":memory:") as saver:
            yield saver
        return
    with _perdure(request.param) as saver:
        yield saver


@pytest.fixture(scope="function", params=[BASELINE, *OURS])
async def async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == BASELINE:
        async with AsyncSqliteSaver.from_conn_string(":memory:") as saver:
            yield saver
        return
    with _perdure(request.param) as saver:
        try:
            yield saver
        finally:
            await saver.aclose()


# -- the report (hooks: this module is also loaded with ``-p perdure_suite``) ----------------


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("PERDURE_SUITE_REPORT")
    if not path:
        return
    failed_setup = report.when == "setup" and not report.passed
    if report.when != "call" and not failed_setup:
        return
    outcome = "skipped" if report.skipped else report.outcome
    line = json.dumps({"test": report.nodeid, "outcome": outcome})
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
