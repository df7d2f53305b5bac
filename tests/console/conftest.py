"""Fixtures of the console tests: a real `perdure console` process on the store under
test and a real headless Chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from console_support import CHROMIUM, CHROMIUM_ARGS, ConsoleProcess, console_process
from playwright.async_api import Browser, async_playwright


@pytest.fixture
def console(perdure_url: str) -> Iterator[ConsoleProcess]:
    """`perdure console` in its own process, on the store under test."""
    yield from console_process(perdure_url)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's chromium, headless. Missing chromium fails the test: `.ci/run` installs it."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()
