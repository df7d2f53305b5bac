"""pytest plugin: real stores, an effect receiver and process control for perdure tests.

``PERDURE_TEST_STORES`` (comma-separated, default ``sqlite,postgresql``) picks the
stores every test using ``perdure_url`` runs on. Another backend joins the matrix by
registering a URL factory under the entry-point group ``perdure.test_stores``: a
function ``(tmp_path) -> contextmanager[str]`` yielding a fresh URL.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from perdure.testing.processes import Processes
from perdure.testing.receivers import Receiver

StoreFactory = Callable[[Path], AbstractContextManager[str]]

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@contextlib.contextmanager
def sqlite_url(tmp_path: Path) -> Generator[str]:
    yield f"sqlite:///{tmp_path / 'perdure.db'}"


@contextlib.contextmanager
def postgresql_url(tmp_path: Path) -> Generator[str]:
    """A fresh schema per test, dropped afterwards. Fails if PostgreSQL is down."""
    import psycopg
    import psycopg.sql

    base = os.environ.get("PERDURE_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    schema = f"perdure_t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    psycopg.sql.Identifier(schema)
                )
            )


BUILTIN: dict[str, StoreFactory] = {"sqlite": sqlite_url, "postgresql": postgresql_url}


def store_names() -> list[str]:
    raw = os.environ.get("PERDURE_TEST_STORES", "sqlite,postgresql")
    return [s.strip() for s in raw.split(",") if s.strip()]


def store_factory(name: str) -> StoreFactory:
    if name in BUILTIN:
        return BUILTIN[name]
    for ep in importlib.metadata.entry_points(group="perdure.test_stores", name=name):
        factory: StoreFactory = ep.load()
        return factory
    raise pytest.UsageError(f"PERDURE_TEST_STORES names {name!r}, which nothing provides")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perdure_store" in metafunc.fixturenames:
        metafunc.parametrize("perdure_store", store_names(), scope="function")


@pytest.fixture
def perdure_url(perdure_store: str, tmp_path: Path) -> Iterator[str]:
    """A URL of a fresh, empty store of the kind under test."""
    with store_factory(perdure_store)(tmp_path) as url:
        yield url


@pytest.fixture
async def perdure_backend(perdure_url: str) -> AsyncIterator[Any]:
    """An opened backend on ``perdure_url``, closed after the test."""
    from perdure.registry import open_backend

    backend = open_backend(perdure_url)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An effect receiver on 127.0.0.1 whose ledger lives in the test process."""
    with Receiver() as r:
        yield r


@pytest.fixture
def processes(
    perdure_url: str, receiver: Receiver, request: pytest.FixtureRequest
) -> Iterator[Processes]:
    """Spawn drive/worker/CLI processes on ``perdure_url``; the test file's folder is on
    their path and ``PERDURE_TEST_RECEIVER`` points at ``receiver``."""
    procs = Processes(
        perdure_url,
        env={"PERDURE_TEST_RECEIVER": receiver.url},
        pythonpath=[Path(str(request.path)).parent],
    )
    try:
        yield procs
    finally:
        procs.close()
