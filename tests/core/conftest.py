"""Fixtures for the store contract tests: a throwaway PostgreSQL schema per session."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest

#: The test server; PostgreSQL tests fail (never skip) when it is unreachable.
PG_SERVER = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A ``postgresql://`` URL naming a fresh schema, dropped at the end of the session."""
    schema = f"perdure_test_{secrets.token_hex(6)}"
    yield f"{PG_SERVER}{'&' if '?' in PG_SERVER else '?'}schema={schema}"
    with psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
