"""The console over plain HTTP: filters, paging, the summary bar, JSONL export, the
login form's own CSRF check, run ids holding "/", the login rate limit and who may read
/metrics (the browser tests cover the actions)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import httpx
from console_support import (
    METRICS_TOKEN,
    SECRET,
    ConsoleProcess,
    console_in_loop,
    one_embedded_store,
)
from console_workflows import refund, transfer, two_sign_offs

from perdure._backend import Backend
from perdure._console._throttle import LoginThrottle
from perdure._records import EventKind, RunStatus
from perdure.testing import wait_for_request

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@contextlib.contextmanager
def logged_in(console: ConsoleProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.base, timeout=30) as client:
        yield _log_in(client)


def _log_in(client: httpx.Client) -> httpx.Client:
    form = client.get("/login")
    token = CSRF.search(form.text)
    assert token, form.text
    forged = client.post("/login", data={"csrf": "nope", "name": "eve", "secret": SECRET})
    assert forged.status_code == 403  # the login form is CSRF-checked too
    done = client.post("/login", data={"csrf": token[1], "name": "dana", "secret": SECRET})
    assert done.status_code == 303, done.text
    return client


def counted(html: str, status: str) -> int:
    """The summary bar's count of ``status``."""
    found = re.search(rf'data-status="{status}">\s*<strong>(\d+)</strong>', html)
    assert found, f"no count of {status} in the summary bar"
    return int(found[1])


def run_ids(html: str) -> list[str]:
    return re.findall(r'<tr class="[^"]*" data-run-id="([^"]+)"', html)


@one_embedded_store
async def test_filters_paging_summary_and_export(
    embedded: Backend, console_command: ConsoleProcess
) -> None:
    tag = uuid.uuid4().hex[:6]
    refunds = [f"refund-{tag}-{n:02d}" for n in range(51)]
    for run_id in refunds:
        await embedded.start(refund, ("order", 5), {}, run_id=run_id)
    parked = f"transfer-{tag}"
    await embedded.start(transfer, ("order", 9), {}, run_id=parked)
    await embedded.idle()

    with logged_in(console_command) as client:
        first = client.get("/")
        assert first.status_code == 200
        assert len(run_ids(first.text)) == 50  # a page
        assert "52 runs · page 1 of 2" in first.text
        assert counted(first.text, "suspended") == 51
        assert counted(first.text, "needs-attention") == 1
        second = client.get("/", params={"page": 2})
        assert len(run_ids(second.text)) == 2
        assert set(run_ids(first.text)) | set(run_ids(second.text)) == {*refunds, parked}

        attention = client.get("/", params={"status": "needs-attention"})
        assert run_ids(attention.text) == [parked]
        waiting = client.get("/", params={"waiting_for": "approval", "q": f"{tag}-0"})
        assert sorted(run_ids(waiting.text)) == refunds[:10]
        workflow = client.get("/", params={"workflow": "transfer"})
        assert run_ids(workflow.text) == [parked]
        assert run_ids(client.get("/", params={"older_than": "1h"}).text) == []
        bad = client.get("/", params={"status": "stuck", "older_than": "soon"})
        assert "status &#39;stuck&#39; is not one of the run statuses" in bad.text
        assert "is not a duration" in bad.text

        # an htmx poll gets the list's body only: one list query, no page chrome
        fragment = client.get("/", headers={"HX-Request": "true"})
        assert "<html" not in fragment.text and len(run_ids(fragment.text)) == 50

        export = client.get(f"/export/{parked}")
        assert export.status_code == 200
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert lines[0]["run"]["run_id"] == parked
        assert lines[1:] == [ev.to_json() for ev in await embedded.history(parked)]

        missing = client.get("/runs/no-such-run")
        assert missing.status_code == 404 and "No such run" in missing.text
        # a link from before exports had their own prefix still exports
        legacy = client.get(f"/runs/{parked}/export.jsonl")
        assert legacy.status_code == 308 and legacy.headers["location"] == f"/export/{parked}"

    anonymous = httpx.get(f"{console_command.base}/export/{parked}")
    assert anonymous.status_code == 303 and "/login" in anonymous.headers["location"]


@one_embedded_store
async def test_a_run_id_with_slashes_routes_to_its_page_export_and_actions(
    embedded: Backend, embedded_console: ConsoleProcess
) -> None:
    run_id = f"team-a/{uuid.uuid4().hex[:6]}/refund 7?x#y"
    shadow = f"{run_id}/export.jsonl"  # a run id that once read as the other's export
    await embedded.start(refund, ("order-7", 700), {}, run_id=run_id)
    await embedded.start(refund, ("order-8", 800), {}, run_id=shadow)
    await embedded.idle()
    path = "/runs/" + quote(run_id, safe="")

    async with httpx.AsyncClient(base_url=embedded_console.base, timeout=30) as client:
        # logging in from the run's link comes back to that run ("?", "#" and all)
        to_login = await client.get(path)
        assert to_login.headers["location"] == f"/login?next={quote(path)}"
        form = await client.get(to_login.headers["location"])
        token = CSRF.search(form.text)
        assert token and f'name="next" value="{path}"' in form.text
        signed_in = await client.post(
            "/login", data={"csrf": token[1], "name": "dana", "secret": SECRET, "next": path}
        )
        assert signed_in.headers["location"] == path
        page = await client.get(path)
        assert page.status_code == 200, page.text
        assert f'hx-get="{path}"' in page.text  # the page's own links route back to it
        assert "refund" in page.text and "approval" in page.text
        export = await client.get("/export/" + quote(run_id, safe=""))
        assert export.status_code == 200
        assert json.loads(export.text.splitlines()[0])["run"]["run_id"] == run_id
        # the exact run id wins over the old export link's shape
        shadowed = await client.get(f"{path}/export.jsonl")
        assert shadowed.status_code == 200 and "order-8" in shadowed.text
        shadow_export = await client.get("/export/" + quote(shadow, safe=""))
        assert json.loads(shadow_export.text.splitlines()[0])["run"]["run_id"] == shadow
        token = CSRF.search(page.text)
        assert token
        approved = await client.post(f"{path}/approve", data={"csrf": token[1], "message": "ok"})
        assert approved.status_code == 303
        assert approved.headers["location"] == path
        back = await client.get(approved.headers["location"])
        assert "approved as dana" in back.text
        # "/" may stay unquoted in a hand-typed link
        assert (await client.get("/runs/" + quote(run_id, safe="/"))).status_code == 200
        assert (await client.get(f"/runs/team-a/{uuid.uuid4().hex}")).status_code == 404

    done = await embedded.wait(run_id, timeout=60)
    assert done.status is RunStatus.SUCCEEDED
    received = [e for e in await embedded.history(run_id) if e.kind is EventKind.SIGNAL_RECEIVED]
    assert [e.data["sent_by"] for e in received] == ["dana"]


@one_embedded_store
async def test_an_approval_from_a_stale_page_does_not_answer_the_next_request(
    embedded: Backend, embedded_console: ConsoleProcess
) -> None:
    run_id = f"sign-offs-{uuid.uuid4().hex[:6]}"
    await embedded.start(two_sign_offs, ("order-3",), {}, run_id=run_id)
    await embedded.idle()
    first = (await embedded.get_run(run_id)).request_id
    assert first is not None
    path = "/runs/" + quote(run_id, safe="")

    async with httpx.AsyncClient(base_url=embedded_console.base, timeout=30) as client:
        await _alog_in(client)
        page = await client.get(path)
        token = CSRF.search(page.text)
        assert token and f'name="request" value="{first}"' in page.text
        # while the page is open, someone else approves the manager's request
        await embedded.approve(run_id, by="ops")
        # the embedded engine moves a run only while someone waits on it (or serves)
        driving = asyncio.ensure_future(embedded.wait(run_id, timeout=300))
        second = await wait_for_request(embedded, run_id, after=first, timeout=120)

        stale = {"csrf": token[1], "request": first, "message": "looks fine"}
        refused = await client.post(f"{path}/approve", data=stale)
        assert refused.status_code == 303
        back = await client.get(refused.headers["location"])
        assert f"no approval request &#39;{first}&#39; is pending" in back.text

    still = await embedded.get_run(run_id)
    assert still.status is RunStatus.SUSPENDED and still.request_id == second
    received = [e for e in await embedded.history(run_id) if e.kind is EventKind.SIGNAL_RECEIVED]
    assert [e.data["sent_by"] for e in received] == ["ops"]
    await embedded.reject(run_id, second, by="ops")
    assert (await driving).result == "manager True, finance False"


async def _alog_in(client: httpx.AsyncClient, secret: str = SECRET) -> httpx.Response:
    form = await client.get("/login")
    token = CSRF.search(form.text)
    assert token, form.text
    return await client.post("/login", data={"csrf": token[1], "name": "dana", "secret": secret})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client_from(console: ConsoleProcess, address: str) -> httpx.AsyncClient:
    """A client whose connections come from ``address`` (any 127.x.y.z is this host)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=console.base, timeout=30, transport=transport)


@one_embedded_store
async def test_failed_logins_are_limited_per_client_with_a_429(embedded_url: str) -> None:
    clock = Clock()
    throttle = LoginThrottle(limit=3, window=60, clock=clock)
    async with (
        console_in_loop(embedded_url, login_throttle=throttle) as console,
        client_from(console, "127.0.0.1") as guesser,
        client_from(console, "127.0.0.2") as other,
    ):
        for _ in range(3):
            wrong = await _alog_in(guesser, "not-the-secret")
            assert wrong.status_code == 401 and "wrong secret" in wrong.text
        clock.now += 20
        throttled = await _alog_in(guesser)  # the right secret, but too many tries
        assert throttled.status_code == 429
        assert throttled.headers["retry-after"] == "40"
        assert "too many failed logins from this client; try again in 40s" in throttled.text
        assert (await guesser.get("/")).status_code == 303  # not logged in

        assert (await _alog_in(other)).status_code == 303  # another client is not held

        clock.now += 40  # the first failure leaves the window
        assert (await _alog_in(guesser)).status_code == 303
        assert (await guesser.get("/")).status_code == 200


@one_embedded_store
async def test_metrics_need_the_scrape_token_or_an_operator_login(
    embedded_url: str, console_command: ConsoleProcess
) -> None:
    async with httpx.AsyncClient(base_url=console_command.base, timeout=30) as client:
        anonymous = await client.get("/metrics")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert "perdure_" not in anonymous.text
        forged = await client.get("/metrics", headers={"Authorization": "Bearer guess"})
        assert forged.status_code == 401
        scraped = await client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert scraped.status_code == 200 and "perdure_runs" in scraped.text
        assert (await _alog_in(client)).status_code == 303
        operator = await client.get("/metrics")
        assert operator.status_code == 200 and "perdure_runs" in operator.text

    async with console_in_loop(embedded_url, metrics_token=None) as no_token:
        header = {"Authorization": f"Bearer {METRICS_TOKEN}"}
        async with httpx.AsyncClient(timeout=30) as client:
            refused = await client.get(f"{no_token.base}/metrics", headers=header)
        assert refused.status_code == 401  # without a token set, only operators read it
