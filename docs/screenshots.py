"""Take the README's console screenshots: a store seeded with a few runs, the console
served in this process, Debian's chromium driven by Playwright.

    uv run python docs/screenshots.py      # writes docs/console-runs.png, docs/console-run.png
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests" / "console"))

import console_workflows as w  # noqa: E402
from chromium_launch import chromium  # noqa: E402
from console_support import SECRET, console_in_loop  # noqa: E402

from perdure._registry import open_backend  # noqa: E402


async def seed(url: str) -> None:
    backend = open_backend(url)
    await backend.open()
    try:
        for n, cents in enumerate((1299, 4500, 250, 18000)):
            await backend.start(w.refund, (f"order-{40 + n}", cents), {}, run_id=f"refund-{40 + n}")
        await backend.start(w.transfer, ("order-77", 90000), {}, run_id="transfer-77")
        await backend.start(w.reconcile_invoice, ("order-13",), {}, run_id="invoice-13")
        await backend.idle()
        await backend.signal(
            "refund-41", "approval", {"approved": True, "message": "ok"}, by="alice"
        )
        await backend.signal("refund-42", "approval", {"approved": False}, by="bob")
        for run_id in ("refund-41", "refund-42", "invoice-13"):
            await backend.wait(run_id, timeout=30)
    finally:
        await backend.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/perdure.db"
        await seed(url)
        async with console_in_loop(url) as console, chromium() as browser:
            base = console.base
            page = await browser.new_page(viewport={"width": 1280, "height": 720})
            await page.goto(f"{base}/")
            await page.fill("input[name=name]", "alice")
            await page.fill("input[name=secret]", SECRET)
            await page.click("button[type=submit]")
            await page.wait_for_selector("[data-testid=runs]")
            await page.screenshot(path=str(HERE / "console-runs.png"))
            await page.goto(f"{base}/runs/refund-40")
            await page.wait_for_selector("[data-testid=pending]")
            await page.screenshot(path=str(HERE / "console-run.png"), full_page=True)
            await page.goto(f"{base}/runs/transfer-77")
            await page.screenshot(path=str(HERE / "console-attention.png"), full_page=True)


if __name__ == "__main__":
    asyncio.run(main())
