"""The console over plain HTTP: filters, paging, the summary bar, JSONL export, and
the login form's own CSRF check (the browser tests cover the actions)."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator

import httpx
from console_support import SECRET, ConsoleProcess, one_embedded_store
from console_workflows import refund, transfer

from perdure.backend import Backend

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

        export = client.get(f"/runs/{parked}/export.jsonl")
        assert export.status_code == 200
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert lines[0]["run"]["run_id"] == parked
        assert lines[1:] == [ev.to_json() for ev in await embedded.history(parked)]

        missing = client.get("/runs/no-such-run")
        assert missing.status_code == 404 and "No such run" in missing.text

    anonymous = httpx.get(f"{console_command.base}/runs/{parked}/export.jsonl")
    assert anonymous.status_code == 303 and "/login" in anonymous.headers["location"]
