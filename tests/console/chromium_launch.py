"""Debian's chromium, headless, driven by Playwright: how the console's browser tests and
``docs/screenshots.py`` launch it (one place, so both see the same browser)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from playwright.async_api import Browser, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless chromium, closed on the way out. Missing chromium is an error that says
    how to install it (``.ci/run`` does)."""
    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: apt-get install -y chromium")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()
