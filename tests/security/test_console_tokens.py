"""With the token authorizer, a console operator logs in with a signed token (issued by
``perdure token issue``): the token's subject is the operator, every action carries the
token to the ``Authorizer``, and the verified decision is recorded in history. A login
by name alone cannot act; a token that does not verify cannot log in."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure._console import ConsoleSettings, create_app
from perdure._tokens import issue_token
from perdure.testing import wait_for_request

KEY = base64.b64encode(b"c" * 32).decode()
SECRET = "token-console-secret"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@perdure.workflow(name="security.console_refund")
async def console_refund(order: str) -> Any:
    return await perdure.wait_for_signal(perdure.APPROVAL, details={"tool": "refund"})


@pytest.fixture
def token_authorizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_AUTHORIZER", "token")
    monkeypatch.setenv("PERDURE_AUTH_KEY", KEY)
    monkeypatch.delenv("PERDURE_TOKEN", raising=False)
    monkeypatch.delenv("PERDURE_ACTOR", raising=False)


async def _client(backend: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(ConsoleSettings(secret=SECRET, backend=backend))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        yield client


async def _csrf(client: httpx.AsyncClient, path: str) -> str:
    page = await client.get(path)
    found = CSRF.search(page.text)
    assert found, page.text
    return found[1]


async def _log_in(client: httpx.AsyncClient, **fields: str) -> httpx.Response:
    csrf = await _csrf(client, "/login")
    return await client.post("/login", data={"csrf": csrf, "secret": SECRET, **fields})


async def _approve(client: httpx.AsyncClient, run_id: str) -> httpx.Response:
    csrf = await _csrf(client, f"/runs/{run_id}")
    return await client.post(f"/runs/{run_id}/approve", data={"csrf": csrf})


async def test_a_console_operator_acts_with_a_signed_token(
    perdure_backend: Any, token_authorizer: None
) -> None:
    await perdure_backend.start(console_refund, ("c-1",), {}, run_id="console-token")
    request = await wait_for_request(perdure_backend, "console-token", timeout=120)
    async for client in _client(perdure_backend):
        forged = issue_token("eve", key=base64.b64encode(b"x" * 32).decode())
        refused = await _log_in(client, name="eve", token=forged)
        assert refused.status_code == 401 and "does not verify" in refused.text
        assert forged not in refused.text

        assert (await _log_in(client, name="dana")).status_code == 303
        by_name = await _approve(client, "console-token")
        assert by_name.status_code == 403 and "requires a signed token" in by_name.text
        assert (await perdure_backend.get_run("console-token")).request_id == request

        token = issue_token("dana", verbs=["approve"], workflows=["security.*"])
        assert (await _log_in(client, name="ignored", token=token)).status_code == 303
        approved = await _approve(client, "console-token")
        assert approved.status_code == 303, approved.text
    info = await perdure_backend.wait("console-token", timeout=120)
    assert info.status is RunStatus.SUCCEEDED
    history = await perdure_backend.history("console-token")
    (answer,) = [e.data for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert answer["sent_by"] == "dana" and answer["request_id"] == request
    assert answer["decision"]["verified"] is True
    assert answer["decision"]["authorizer"] == "token"
