"""DBOS-only tests: ``perdure_url`` is overridden to a fresh DBOS store.

The stores are the ``dbos+...`` names in ``PERDURE_TEST_STORES`` (both DBOS stores
when it names none), so these tests never run against the embedded engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perdure.testing import Receiver
from perdure.testing.plugin import store_factory, store_names

DBOS_STORES = [s for s in store_names() if s.startswith("dbos+")] or [
    "dbos+sqlite",
    "dbos+postgresql",
]


@pytest.fixture(params=DBOS_STORES)
def dbos_store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def perdure_url(dbos_store: str, tmp_path: Path) -> Iterator[str]:
    """A fresh DBOS system database (SQLite file or PostgreSQL schema)."""
    with store_factory(dbos_store)(tmp_path) as url:
        yield url


@pytest.fixture
def flows(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The DBOS tests' workflows (``dbos_flows``), their effects sent to ``receiver``."""
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import dbos_flows

    return dbos_flows
