"""Fixtures every Temporal test module shares: the flows module the workers import, a
fresh task queue on the session's dev server, and a backend opened on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from perdure._registry import open_backend
from perdure_temporal import TemporalBackend
from perdure_temporal.testing import fresh_url


@pytest.fixture
def flows() -> Any:
    import temporal_flows

    return temporal_flows


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A fresh task queue with the default payload threshold (16 KiB)."""
    return fresh_url(tmp_path)


@pytest.fixture
async def backend(url: str) -> AsyncIterator[TemporalBackend]:
    b = open_backend(url)
    assert isinstance(b, TemporalBackend)
    await b.open()
    try:
        yield b
    finally:
        await b.close()
