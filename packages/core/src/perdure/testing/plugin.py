"""pytest plugin: real stores, an effect receiver and process control for perdure tests.

``PERDURE_TEST_STORES`` (comma-separated, default ``sqlite,postgresql``) picks the
stores every test using ``perdure_url`` runs on. Another backend joins the matrix by
registering a URL factory under the entry-point group ``perdure.test_stores``: a
function ``(tmp_path) -> contextmanager[str]`` yielding a fresh URL. Under the group
``perdure.test_corrupters`` (same name) it registers a corrupter: a function
``(url, run_id, seq) -> None`` that overwrites the stored record of history event (or
step) ``seq`` of ``run_id`` with bytes that are not JSON, behind the store's back.

Two markers shape the columns of one test:

* ``@pytest.mark.perdure_memory`` — the test never leaves its process, so it also runs
  on ``memory``, the embedded engine on an in-memory store: a fast extra column.
* ``@pytest.mark.perdure_not_on("dbos+sqlite", ..., reason="...")`` — keeps the test off
  the columns named, saying why (a column that cannot express the scenario, or a known
  drift of that backend being fixed). It is collected on every other column.
* ``@pytest.mark.perdure_only("sqlite", "postgresql", reason="...")`` — runs the test
  on those columns alone (of the ones selected), e.g. SQL written behind a store.
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
Corrupter = Callable[[str, str, int], None]

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


#: In-memory stores of the ``memory`` column by URL: every backend opened on one URL
#: in this process shares its store, as processes share a database.
_MEMORY: dict[str, Any] = {}


@contextlib.contextmanager
def memory_url(tmp_path: Path) -> Generator[str]:
    """A fresh in-memory store (this process only), dropped afterwards."""
    from perdure._stores.memory import MemoryStore

    url = f"memory://{uuid.uuid4().hex}"
    _MEMORY[url] = MemoryStore(url)
    try:
        yield url
    finally:
        _MEMORY.pop(url, None)


def open_memory_backend(url: str) -> Any:
    """``memory://`` URLs (the test column only): the embedded engine on the shared store."""
    from perdure._engine.backend import EmbeddedBackend
    from perdure._errors import ConfigurationError

    store = _MEMORY.get(url)
    if store is None:
        raise ConfigurationError(f"{url!r} names no in-memory store of this test process")
    return EmbeddedBackend(store, poll_interval=0.01)


BUILTIN: dict[str, StoreFactory] = {
    "sqlite": sqlite_url,
    "postgresql": postgresql_url,
    "memory": memory_url,
}

NOT_JSON = "{not json"


def _one_row(rowcount: int, url: str, run_id: str, seq: int) -> None:
    if rowcount != 1:
        raise LookupError(f"{url}: run {run_id!r} has no stored history record #{seq}")


def corrupt_sqlite(url: str, run_id: str, seq: int) -> None:
    """Overwrite history event ``seq`` of the embedded SQLite store with non-JSON."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        done = conn.execute(
            "UPDATE events SET data = ? WHERE run_id = ? AND seq = ?", (NOT_JSON, run_id, seq)
        )
        _one_row(done.rowcount, url, run_id, seq)


def corrupt_postgresql(url: str, run_id: str, seq: int) -> None:
    """Overwrite history event ``seq`` of the embedded PostgreSQL store with non-JSON."""
    from urllib.parse import parse_qs, urlsplit

    import psycopg
    import psycopg.sql

    parts = urlsplit(url)
    schema = parse_qs(parts.query).get("schema", ["public"])[0]
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as conn:
        done = conn.execute(
            psycopg.sql.SQL("UPDATE {}.events SET data = %s WHERE run_id = %s AND seq = %s").format(
                psycopg.sql.Identifier(schema)
            ),
            (NOT_JSON, run_id, seq),
        )
        _one_row(done.rowcount, url, run_id, seq)


BUILTIN_CORRUPTERS: dict[str, Corrupter] = {
    "sqlite": corrupt_sqlite,
    "postgresql": corrupt_postgresql,
}


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


def store_corrupter(name: str) -> Corrupter:
    if name in BUILTIN_CORRUPTERS:
        return BUILTIN_CORRUPTERS[name]
    for ep in importlib.metadata.entry_points(group="perdure.test_corrupters", name=name):
        corrupter: Corrupter = ep.load()
        return corrupter
    raise pytest.UsageError(
        f"store {name!r} registers no corrupter (entry-point group perdure.test_corrupters)"
    )


def pytest_configure(config: pytest.Config) -> None:
    from perdure._registry import register_backend

    register_backend("memory", open_memory_backend)
    config.addinivalue_line(
        "markers", "perdure_memory: also run on the in-memory column (in-process tests only)"
    )
    config.addinivalue_line(
        "markers", "perdure_not_on(*columns, reason): keep this test off those columns"
    )
    config.addinivalue_line(
        "markers", "perdure_only(*columns, reason): run this test on those columns only"
    )
    config.addinivalue_line(
        "markers", "restarts(*columns): a substrate-restart scenario of those store columns"
    )


def columns_for(node: pytest.Function | pytest.Module | Any) -> list[str]:
    """The columns a test runs on: ``PERDURE_TEST_STORES``, plus ``memory`` for
    ``perdure_memory`` tests, minus what ``perdure_not_on`` names, within what
    ``perdure_only`` names."""
    names = store_names()
    if node.get_closest_marker("perdure_memory") is not None and "memory" not in names:
        names = ["memory", *names]
    for mark in node.iter_markers("perdure_not_on"):
        if not mark.kwargs.get("reason"):
            raise pytest.UsageError(f"{node.nodeid}: perdure_not_on needs a reason=")
        names = [n for n in names if n not in mark.args]
    for mark in node.iter_markers("perdure_only"):
        if not mark.kwargs.get("reason"):
            raise pytest.UsageError(f"{node.nodeid}: perdure_only needs a reason=")
        names = [n for n in names if n in mark.args]
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perdure_store" in metafunc.fixturenames:
        metafunc.parametrize("perdure_store", columns_for(metafunc.definition), scope="function")


@pytest.fixture
def perdure_url(perdure_store: str, tmp_path: Path) -> Iterator[str]:
    """A URL of a fresh, empty store of the kind under test."""
    with store_factory(perdure_store)(tmp_path) as url:
        yield url


@pytest.fixture
def perdure_corrupt(perdure_store: str, perdure_url: str) -> Callable[[str, int], None]:
    """``corrupt(run_id, seq)``: overwrite the stored record of history event/step ``seq``
    of ``run_id`` in ``perdure_url`` with non-JSON, behind the store's back."""
    corrupter = store_corrupter(perdure_store)

    def corrupt(run_id: str, seq: int) -> None:
        corrupter(perdure_url, run_id, seq)

    return corrupt


@pytest.fixture
async def perdure_backend(perdure_url: str) -> AsyncIterator[Any]:
    """An opened backend on ``perdure_url``, closed after the test."""
    from perdure._registry import open_backend

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


#: SIGKILLs per column of the chaos scenario in an ordinary test run (CI).
CHAOS_KILLS = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perdure")
    group.addoption(
        "--kills",
        type=int,
        default=None,
        help=f"SIGKILLs per column in the chaos scenarios (default {CHAOS_KILLS}; "
        "the long soak: nox -s chaos -- --kills 200)",
    )


@pytest.fixture
def chaos_kills(request: pytest.FixtureRequest) -> int:
    """How many driving processes the chaos scenario SIGKILLs (``--kills``)."""
    kills: int | None = request.config.getoption("--kills")
    return CHAOS_KILLS if kills is None else kills
