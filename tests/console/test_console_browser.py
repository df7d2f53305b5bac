"""The console in a real headless Chromium: an operator logs in, approves a suspended
run and sees who approved and how long it waited; reconciles a parked effect; nobody
acts without logging in; and run ids holding "/" open, export and approve their own run."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from console_support import SECRET, ConsoleProcess
from console_workflows import refund, transfer
from playwright.async_api import Browser, Page, expect

from perdure._backend import Backend
from perdure._records import EventKind, RunStatus


async def log_in(page: Page, console: ConsoleProcess, name: str = "alice") -> None:
    await page.goto(f"{console.base}/")
    await expect(page).to_have_url(f"{console.base}/login?next=/")
    await page.fill("input[name=name]", name)
    await page.fill("input[name=secret]", SECRET)
    await page.click("button[type=submit]")
    await expect(page.get_by_test_id("operator")).to_have_text(name)


async def suspended_refund(backend: Backend, run_id: str) -> None:
    await backend.start(refund, ("order-42", 1299), {}, run_id=run_id)
    await backend.idle()
    info = await backend.get_run(run_id)
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == "approval", info


async def test_operator_approves_a_suspended_run_and_sees_approver_and_wait(
    perdure_backend: Backend, console: ConsoleProcess, browser: Browser
) -> None:
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    await suspended_refund(perdure_backend, run_id)
    page = await browser.new_page()
    await log_in(page, console)

    row = page.locator(f"tr[data-run-id='{run_id}']")
    await expect(row).to_contain_text("suspended")
    await expect(row).to_contain_text("waits for approval")
    await expect(page.get_by_test_id("oldest")).to_have_text(run_id)
    await row.get_by_role("link", name=run_id).click()

    pending = page.get_by_test_id("pending")
    await expect(pending).to_contain_text("refund")
    await expect(pending).to_contain_text("1299")
    await page.fill("[data-testid=pending] input[name=message]", "within policy")
    await page.get_by_test_id("approve").click()
    await expect(page.get_by_test_id("flash")).to_have_text("approved as alice")

    info = await perdure_backend.wait(run_id, timeout=120)  # this process drives it on
    assert info.status is RunStatus.SUCCEEDED, info
    events = await perdure_backend.history(run_id)
    received = [ev for ev in events if ev.kind is EventKind.SIGNAL_RECEIVED]
    assert len(received) == 1
    data: dict[str, Any] = received[0].data
    assert data["sent_by"] == "alice"
    assert data["payload"] == {"approved": True, "message": "within policy"}

    # no reload: the page's htmx poll (every 5 s) brings the finished run in
    await expect(page.get_by_test_id("status")).to_have_text("succeeded", timeout=60_000)
    await expect(page.get_by_test_id("decided-by")).to_have_text("alice")
    await expect(page.get_by_test_id("waited")).to_have_text(f"{data['waited']:.1f}s")
    await expect(
        page.get_by_test_id("timeline").locator("li[data-kind=signal_received]")
    ).to_contain_text("sent by alice")
    await expect(page.get_by_test_id("result")).to_contain_text("refunded 1299 on order-42")


async def test_needs_attention_run_reconciled_from_the_page(
    embedded: Backend, embedded_console: ConsoleProcess, browser: Browser
) -> None:
    run_id = f"transfer-{uuid.uuid4().hex[:8]}"
    await embedded.start(transfer, ("order-9", 90000), {}, run_id=run_id)
    parked = await embedded.wait(run_id, timeout=60)
    assert parked.status is RunStatus.NEEDS_ATTENTION, parked
    page = await browser.new_page()
    await log_in(page, embedded_console, "bob")
    await page.goto(f"{embedded_console.base}/?status=needs-attention")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    await expect(row).to_contain_text("unknown outcome at step 1:wire")
    await row.get_by_role("link", name=run_id).click()

    attention = page.get_by_test_id("attention")
    await expect(attention).to_contain_text("Unknown outcome at step 1:wire")
    await expect(attention).to_contain_text("connection reset after send")
    await expect(attention).to_contain_text("90000")
    await page.check("input[name=outcome][value=succeeded]")
    await page.fill("[data-testid=reconcile-result]", json.dumps("wire-ref-77"))
    await page.get_by_test_id("reconcile").click()
    await expect(page.get_by_test_id("flash")).to_have_text(
        "reconciled step 1:wire as succeeded (by bob)"
    )

    info = await embedded.wait(run_id, timeout=60)
    assert info.status is RunStatus.SUCCEEDED, info
    assert info.result == "transfer done: wire-ref-77"
    reconciled = [ev for ev in await embedded.history(run_id) if ev.kind is EventKind.RECONCILED]
    assert [(ev.data["outcome"], ev.data["by"]) for ev in reconciled] == [("succeeded", "bob")]
    await page.reload()
    await expect(page.get_by_test_id("status")).to_have_text("succeeded")


async def test_actions_without_login_or_csrf_token_are_refused(
    embedded: Backend, embedded_console: ConsoleProcess, browser: Browser
) -> None:
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    await suspended_refund(embedded, run_id)
    before = await embedded.history(run_id)
    page = await browser.new_page()
    base = embedded_console.base

    # no session at all: refused, and the pages send the browser to the login form
    anonymous = await page.request.post(f"{base}/runs/{run_id}/approve", form={"csrf": "x"})
    assert anonymous.status == 403
    assert "log in before acting" in await anonymous.text()
    await page.goto(f"{base}/runs/{run_id}")
    await expect(page).to_have_url(f"{base}/login?next=/runs/{run_id}")

    # a wrong secret does not log in
    await page.fill("input[name=name]", "mallory")
    await page.fill("input[name=secret]", "not-the-secret")
    await page.click("button[type=submit]")
    await expect(page.get_by_test_id("login-error")).to_have_text("wrong secret")

    # logged in, but a forged form without this session's CSRF token: refused
    await log_in(page, embedded_console, "carol")
    forged = await page.request.post(
        f"{base}/runs/{run_id}/approve", form={"csrf": "forged", "message": "x"}
    )
    assert forged.status == 403
    assert "CSRF" in await forged.text()

    info = await embedded.get_run(run_id)
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == "approval"
    assert await embedded.history(run_id) == before


async def test_run_ids_holding_slashes_open_export_and_approve_the_right_run(
    embedded: Backend, embedded_console: ConsoleProcess, browser: Browser
) -> None:
    tenant = f"tenant-7/refunds/{uuid.uuid4().hex[:6]}"
    shadow = f"{tenant}/export.jsonl"  # reads like the first run's export link once did
    await suspended_refund(embedded, tenant)
    await suspended_refund(embedded, shadow)
    page = await browser.new_page()
    await log_in(page, embedded_console, "erin")

    await page.locator(f"tr[data-run-id='{tenant}']").get_by_role("link", name=tenant).click()
    await expect(page.locator("h1 code")).to_have_text(tenant)
    async with page.expect_download() as downloading:
        await page.get_by_role("link", name="export JSONL").click()
    exported = Path(await (await downloading.value).path()).read_text().splitlines()
    assert json.loads(exported[0])["run"]["run_id"] == tenant
    assert [json.loads(line) for line in exported[1:]] == [
        ev.to_json() for ev in await embedded.history(tenant)
    ]

    await page.goto(f"{embedded_console.base}/")
    await page.locator(f"tr[data-run-id='{shadow}']").get_by_role("link", name=shadow).click()
    await expect(page.locator("h1 code")).to_have_text(shadow)  # its page, not a download
    await page.get_by_test_id("approve").click()
    await expect(page.get_by_test_id("flash")).to_have_text("approved as erin")
    assert (await embedded.wait(shadow, timeout=60)).status is RunStatus.SUCCEEDED
    await page.reload()
    await expect(page.get_by_test_id("status")).to_have_text("succeeded")
    await expect(page.get_by_test_id("decided-by")).to_have_text("erin")

    untouched = await embedded.get_run(tenant)
    assert untouched.status is RunStatus.SUSPENDED and untouched.waiting_for == "approval"
