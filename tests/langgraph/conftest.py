"""Stores for the PerdureSaver tests: a SQLite file per test, a PostgreSQL schema per session.

``PERDURE_TEST_STORES`` (comma list; default ``sqlite,postgresql``) picks the stores;
the saver runs on the SQL ones (and DBOS's) among them. PostgreSQL comes from
``PERDURE_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
tests using it fail, never skip, when the server cannot be reached.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
KNOWN_STORES = ("sqlite", "postgresql")
#: On DBOS the checkpoints live in DBOS's own database: the same URL with ``dbos+``.
DBOS_STORES = tuple(f"dbos+{name}" for name in KNOWN_STORES)


def lg_store_names() -> list[str]:
    """The stores selected by ``PERDURE_TEST_STORES``."""
    raw = os.environ.get("PERDURE_TEST_STORES", ",".join(KNOWN_STORES))
    names = [s.strip() for s in raw.split(",") if s.strip()]
    # Other backends (Temporal) keep checkpoints in a SQL database of these kinds: the
    # saver itself is tested on those, and the graph tests run on every column.
    return [n for n in names if n in KNOWN_STORES + DBOS_STORES]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lg_store" in metafunc.fixturenames:
        metafunc.parametrize("lg_store", lg_store_names())


def _with_param(url: str, key: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{key}={value}"


@pytest.fixture(scope="session")
def lg_postgres_base() -> str:
    """The PostgreSQL server URL; fails the test if it does not answer."""
    base = os.environ.get("PERDURE_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    try:
        with psycopg.connect(base, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL at {base} is unreachable (tests fail, never skip): {exc}")
    return base


@pytest.fixture(scope="session")
def lg_postgres_urls(lg_postgres_base: str) -> Iterator[dict[str, str]]:
    """One fresh schema ``lg_test_<hex>`` per store kind for the session (the tests reuse
    thread ids, so ``postgresql`` and ``dbos+postgresql`` must not share one), dropped at
    its end."""
    schemas: dict[str, str] = {}
    yield schemas
    with psycopg.connect(lg_postgres_base, autocommit=True, connect_timeout=5) as conn:
        for schema in schemas.values():
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


@pytest.fixture
def lg_url(lg_store: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A store URL for ``lg_store``: a new SQLite file, or the session's PostgreSQL schema."""
    prefix = "dbos+" if lg_store.startswith("dbos+") else ""
    if lg_store.removeprefix("dbos+") == "sqlite":
        return f"{prefix}sqlite:///{tmp_path / 'checkpoints.db'}"
    schemas: dict[str, str] = request.getfixturevalue("lg_postgres_urls")
    schema = schemas.setdefault(lg_store, f"lg_test_{secrets.token_hex(6)}")
    base: str = request.getfixturevalue("lg_postgres_base")
    return prefix + _with_param(base, "schema", schema)
