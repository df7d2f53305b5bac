"""The HTTP gateway in front of a receiver that does not deduplicate (the Receiver's
``/plain`` endpoint): real gateway processes, real HTTP, SIGKILLs; every count is taken
at the receiver.

Without the gateway, each scenario below applies the effect twice (the conformance
suite shows it for ``/plain``: a retried non-idempotent effect must park instead).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from gateway_support import cli_json, start_gateway, wait_for_waiters

from perdure import RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

pytestmark = pytest.mark.perdure_only(
    "sqlite", "postgresql", reason="the gateway's ledger lives in a SQLite or PostgreSQL store"
)

STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)


async def _post(url: str, key: str | None, body: Any) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    async with httpx.AsyncClient(timeout=120) as client:
        return await client.post(f"{url}/recv/plain/mail", json=body, headers=headers)


async def test_a_sigkilled_workers_retried_call_reaches_the_upstream_once(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    gateway = start_gateway(processes, receiver)
    env = {"PERDURE_TEST_GATEWAY": gateway.url}
    hold = receiver.hold("mail", "after")  # applied; the worker never hears back
    driver = processes.drive("gateway_flows", "notify", "ada", run_id="g-kill", env=env)
    await asyncio.to_thread(receiver.wait_held, hold)
    driver.kill()
    hold.release.set()  # the answer reaches the gateway, which stores it

    processes.worker("gateway_flows", env=env)
    info = await wait_for_status(perdure_backend, "g-kill", STOPPED)
    assert info.status is RunStatus.SUCCEEDED
    assert receiver.requests["mail"] == 1  # the retry was answered by the gateway
    assert receiver.applied["mail"] == 1
    assert receiver.keys["mail"] == ["g-kill:1:send_mail"]
    assert info.result == {"id": "mail-1", "duplicate": False}  # the answer the first call got


async def test_an_unknown_outcome_from_the_gateway_parks_the_idempotent_step(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    # The worker and the gateway die while the upstream applies the call: the retry
    # hears 409 outcome_unknown, which no retry can change, so the run parks.
    gateway = start_gateway(processes, receiver)
    hold = receiver.hold("mail", "after")
    env = {"PERDURE_TEST_GATEWAY": gateway.url}
    driver = processes.drive("gateway_flows", "notify", "ada", run_id="g-lost", env=env)
    await asyncio.to_thread(receiver.wait_held, hold)
    driver.kill()
    gateway.kill()
    hold.release.set()

    restarted = start_gateway(processes, receiver)
    processes.worker("gateway_flows", env={"PERDURE_TEST_GATEWAY": restarted.url})
    info = await wait_for_status(perdure_backend, "g-lost", STOPPED)
    assert info.status is RunStatus.NEEDS_ATTENTION, info.error
    attention = info.attention or {}
    assert attention["reason"] == "unknown-outcome"
    assert attention["step_key"] == "1:send_mail"
    assert attention["name"] == "send_mail"
    assert "409 outcome_unknown" in attention["message"]
    assert receiver.requests["mail"] == 1  # never re-sent

    # The operator checked the upstream (the mail did not go out, say) and lets it retry.
    forgot = processes.cli("gateway", "forget", "recv", "g-lost:1:send_mail")
    assert forgot.returncode == 0, forgot.stderr
    again = processes.cli("reconcile", "g-lost", "--step", "1:send_mail", "--retry", "--by", "ops")
    assert again.returncode == 0, again.stderr
    info = await wait_for_status(perdure_backend, "g-lost", STOPPED)
    assert info.status is RunStatus.SUCCEEDED, info.error
    assert receiver.requests["mail"] == 2
    assert info.result == {"id": "mail-2", "duplicate": False}


async def test_concurrent_requests_with_one_key_reach_the_upstream_once(
    receiver: Receiver, processes: Processes
) -> None:
    # Two gateways on one store: the ledger, not a process's memory, lets one through.
    first, second = start_gateway(processes, receiver), start_gateway(processes, receiver)
    hold = receiver.hold("mail", "before")
    a = asyncio.ensure_future(_post(first.url, "k-1", {"to": "ada"}))
    await asyncio.to_thread(receiver.wait_held, hold)
    b = asyncio.ensure_future(_post(second.url, "k-1", {"to": "ada"}))
    c = asyncio.ensure_future(_post(first.url, "k-1", {"to": "ada"}))
    await asyncio.to_thread(wait_for_waiters, second, "k-1", 1)
    await asyncio.to_thread(wait_for_waiters, first, "k-1", 1)
    hold.release.set()
    answers = await asyncio.gather(a, b, c)

    assert [r.status_code for r in answers] == [200, 200, 200]
    assert {r.content for r in answers} == {answers[0].content}
    assert [r.headers.get("idempotent-replayed") for r in answers] == [None, "true", "true"]
    assert receiver.requests["mail"] == 1
    assert receiver.applied["mail"] == 1

    # The key reused for another request is refused, not forwarded.
    reused = await _post(second.url, "k-1", {"to": "bob"})
    assert reused.status_code == 422
    assert reused.json()["error"] == "idempotency_key_reused"
    # A request without a key passes through, as to the upstream itself.
    plain = await _post(first.url, None, {"to": "eve"})
    assert plain.status_code == 200
    assert receiver.requests["mail"] == 2


async def test_a_gateway_killed_mid_forward_reports_the_unknown_outcome_on_restart(
    receiver: Receiver, processes: Processes
) -> None:
    gateway = start_gateway(processes, receiver)
    hold = receiver.hold("mail", "after")  # the upstream applied it; the gateway dies
    first = asyncio.ensure_future(_post(gateway.url, "k-lost", {"to": "ada"}))
    await asyncio.to_thread(receiver.wait_held, hold)
    gateway.kill()
    hold.release.set()
    with pytest.raises(httpx.TransportError):
        await first

    restarted = start_gateway(processes, receiver)
    retry = await _post(restarted.url, "k-lost", {"to": "ada"})
    assert retry.status_code == 409
    body = retry.json()
    assert body["error"] == "outcome_unknown"
    assert body["upstream"] == "recv"
    assert body["idempotency_key"] == "k-lost"
    assert "its process is gone" in body["reason"]
    assert receiver.requests["mail"] == 1  # never re-sent

    listed = cli_json(processes, "gateway", "status", "--state", "unknown", "--format", "json")
    assert [(a["upstream"], a["idempotency_key"], a["state"]) for a in listed] == [
        ("recv", "k-lost", "unknown")
    ]
    table = processes.cli("gateway", "status")
    assert table.returncode == 0, table.stderr
    assert "k-lost" in table.stdout
    assert "1 with an unknown outcome" in table.stdout

    # An operator checked the upstream and lets the next retry through.
    forgot = processes.cli("gateway", "forget", "recv", "k-lost")
    assert forgot.returncode == 0, forgot.stderr
    again = await _post(restarted.url, "k-lost", {"to": "ada"})
    assert again.status_code == 200
    assert receiver.requests["mail"] == 2
    missing = processes.cli("gateway", "forget", "recv", "no-such-key")
    assert missing.returncode == 3
    assert "no attempt recv/no-such-key" in missing.stderr


async def test_the_gateway_adds_no_headers_of_its_own(
    receiver: Receiver, processes: Processes
) -> None:
    # A proxy passes the upstream's Server and Date; uvicorn's own would be duplicates.
    gateway = start_gateway(processes, receiver)
    async with httpx.AsyncClient(timeout=120) as client:
        first = await client.post(
            f"{gateway.url}/recv/plain/mail", json={"to": "ada"}, headers={"Idempotency-Key": "h"}
        )
        again = await client.post(
            f"{gateway.url}/recv/plain/mail", json={"to": "ada"}, headers={"Idempotency-Key": "h"}
        )
        own = await client.get(f"{gateway.url}/nope/x")
    for answer in (first, again):
        assert answer.status_code == 200
        assert len(answer.headers.get_list("server")) == 1
        assert answer.headers["server"].startswith("BaseHTTP")  # the receiver's
        assert len(answer.headers.get_list("date")) == 1
    # The retry right after the first answer is the stored answer, not a second call.
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert receiver.requests["mail"] == 1
    # What the gateway answers itself carries neither.
    assert own.status_code == 404 and own.json()["error"] == "unknown_upstream"
    assert "server" not in own.headers and "date" not in own.headers
