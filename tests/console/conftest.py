"""Fixtures of the console tests: a real `perdure console` process on the store under
test and a real headless Chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium_launch import CHROMIUM, chromium
from console_support import EMBEDDED, ConsoleProcess, console_in_loop, console_process
from playwright.async_api import Browser

from perdure._registry import open_backend
from perdure.testing.plugin import store_factory


@pytest.fixture
async def console(perdure_store: str, perdure_url: str) -> AsyncIterator[ConsoleProcess]:
    """The console on the store under test: `perdure console` in its own process for
    DBOS and Temporal (a second client of the substrate, as in production), in this
    event loop for the embedded stores."""
    if perdure_store in ("sqlite", "postgresql"):
        async with console_in_loop(perdure_url) as running:
            yield running
        return
    for running in console_process(perdure_url):
        yield running


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's chromium, headless. Missing chromium fails the test: `.ci/run` installs it."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    async with chromium() as launched:
        yield launched


@pytest.fixture(params=EMBEDDED)
def embedded_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh SQLite or PostgreSQL store (the scenarios every embedded column runs)."""
    with store_factory(request.param)(tmp_path) as url:
        yield url


@pytest.fixture
async def embedded(embedded_url: str) -> Any:
    backend = open_backend(embedded_url)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def embedded_console(embedded_url: str) -> AsyncIterator[ConsoleProcess]:
    async with console_in_loop(embedded_url) as running:
        yield running


@pytest.fixture
def console_command(embedded_url: str) -> Iterator[ConsoleProcess]:
    """`perdure console` itself, in its own process."""
    yield from console_process(embedded_url)
