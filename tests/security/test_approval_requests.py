"""Finding 3: an approval answers one request, named by its id, while it is pending.

Each approval wait records a request id (in its ``suspended`` event and the run's
``request_id``); an answer for a request that is not pending (never asked, answered,
the run moved on) is ``ApprovalNotPendingError``; nothing sent before a wait began
answers it; of two concurrent answers to one request exactly one is taken.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure._errors import ApprovalNotPendingError, InvalidRunStateError
from perdure._semantics import approvals
from perdure.testing import Processes, wait_for_request

pytestmark = pytest.mark.perdure_memory


@perdure.workflow(name="security.two_approvals")
async def two_approvals(amount: int) -> list[Any]:
    """Request 1 for a small amount, then request 2 ("wire $1M") nobody has seen yet."""
    first = await perdure.wait_for_signal(perdure.APPROVAL, details={"amount": amount})
    second = await perdure.wait_for_signal(perdure.APPROVAL, details={"amount": 1_000_000})
    return [first, second]


@pytest.fixture(autouse=True)
async def close_connections() -> AsyncIterator[None]:
    """``perdure.approve(url=...)`` opens this process's backend for the URL: close it
    after the test (DBOS allows one system database per process)."""
    yield
    await perdure.shutdown(grace=5)


def drive(backend: Any, run_id: str) -> asyncio.Task[Any]:
    """Start the run and keep driving it in this process whenever it is due (on the
    embedded engine a run moves only while someone waits on it or serves)."""

    async def go() -> Any:
        handle = await backend.start(two_approvals, (5,), {}, run_id=run_id)
        return await handle.result(timeout=300)

    return asyncio.ensure_future(go())


async def pending(backend: Any, run_id: str, after: str | None = None) -> str:
    """The request id the run waits on (other than ``after``), once it waits."""
    request = await wait_for_request(backend, run_id, after=after, timeout=120)
    info = await backend.get_run(run_id)
    assert (info.status, info.waiting_for) == (RunStatus.SUSPENDED, perdure.APPROVAL)
    return request


async def test_each_wait_records_its_request_id_and_the_answer_names_it(
    perdure_backend: Any,
) -> None:
    run = drive(perdure_backend, "req-ids")
    first = await pending(perdure_backend, "req-ids")
    assert first == approvals.request_id("req-ids", "1:signal:approval")
    await perdure.approve("req-ids", first, by="ann", url=perdure_backend.url)
    second = await pending(perdure_backend, "req-ids", first)
    assert second == approvals.request_id("req-ids", "2:signal:approval") != first
    await perdure.reject("req-ids", second, by="bob", message="no", url=perdure_backend.url)
    assert await run == [
        {"approved": True, "message": None},
        {"approved": False, "message": "no"},
    ]
    history = await perdure_backend.history("req-ids")
    asked = [e.data["request_id"] for e in history if e.kind is EventKind.SUSPENDED]
    assert asked == [first, second]
    received = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert [(e.name, e.data["request_id"], e.data["sent_by"]) for e in received] == [
        ("approval", first, "ann"),
        ("approval", second, "bob"),
    ]


async def test_a_second_approval_of_request_1_does_not_approve_request_2(
    perdure_backend: Any,
) -> None:
    """The audit's reproduction: two approvals sent for request 1 approved request 2."""
    run = drive(perdure_backend, "req-twice")
    first = await pending(perdure_backend, "req-twice")
    await perdure.approve("req-twice", first, by="ann", url=perdure_backend.url)
    second = await pending(perdure_backend, "req-twice", first)
    with pytest.raises(ApprovalNotPendingError, match=first) as refused:
        await perdure.approve("req-twice", first, by="ann", url=perdure_backend.url)
    assert (refused.value.run_id, refused.value.request_id) == ("req-twice", first)
    info = await perdure_backend.get_run("req-twice")
    assert (info.status, info.request_id) == (RunStatus.SUSPENDED, second)
    await perdure.reject("req-twice", second, by="cy", url=perdure_backend.url)
    assert (await run)[1]["approved"] is False


async def test_an_approval_sent_before_the_wait_began_is_refused_and_never_answers_it(
    perdure_backend: Any,
) -> None:
    run = drive(perdure_backend, "req-early")
    first = await pending(perdure_backend, "req-early")
    # Request 2's id is derivable, but it is not asked yet: refused, nothing stored.
    future = approvals.request_id("req-early", "2:signal:approval")
    with pytest.raises(ApprovalNotPendingError, match=future):
        await perdure.approve("req-early", future, by="mallory", url=perdure_backend.url)
    await perdure.approve("req-early", first, by="ann", url=perdure_backend.url)
    second = await pending(perdure_backend, "req-early", first)
    assert second == future  # the run waits on it: the early answer did not satisfy it
    history = await perdure_backend.history("req-early")
    assert [e.data["sent_by"] for e in history if e.kind is EventKind.SIGNAL_RECEIVED] == ["ann"]
    await perdure.approve("req-early", second, by="bob", url=perdure_backend.url)
    assert len(await run) == 2


async def test_an_answer_to_a_run_not_waiting_or_ended_is_a_typed_error(
    perdure_backend: Any,
) -> None:
    run = drive(perdure_backend, "req-none")
    first = await pending(perdure_backend, "req-none")
    with pytest.raises(ApprovalNotPendingError, match="req-none"):
        await perdure.approve("req-none", "0" * 16, by="ann", url=perdure_backend.url)
    await perdure.approve("req-none", first, by="ann", url=perdure_backend.url)
    second = await pending(perdure_backend, "req-none", first)
    await perdure.approve("req-none", second, by="ann", url=perdure_backend.url)
    await run
    with pytest.raises(InvalidRunStateError, match="req-none"):
        await perdure.approve("req-none", second, by="ann", url=perdure_backend.url)
    with pytest.raises(InvalidRunStateError, match="req-none"):
        await perdure.approve("req-none", by="ann", url=perdure_backend.url)


async def test_the_bare_approval_signal_answers_only_the_request_pending_now(
    perdure_backend: Any,
) -> None:
    """``signal(run, "approval")`` (and ``approve`` without a request) is checked in the
    same write: before any wait it is refused, not kept for a later request."""
    run = drive(perdure_backend, "req-bare")
    first = await pending(perdure_backend, "req-bare")
    await perdure_backend.signal("req-bare", perdure.APPROVAL, {"approved": True}, by="ann")
    second = await pending(perdure_backend, "req-bare", first)
    await perdure.approve("req-bare", by="bob", url=perdure_backend.url)
    await run
    history = await perdure_backend.history("req-bare")
    received = [e.data for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert [(d["request_id"], d["sent_by"]) for d in received] == [(first, "ann"), (second, "bob")]


@pytest.mark.perdure_not_on("memory", reason="needs processes sharing one store")
async def test_two_concurrent_approvals_of_one_request_exactly_one_wins(
    perdure_backend: Any, processes: Processes
) -> None:
    run = drive(perdure_backend, "req-race")
    first = await pending(perdure_backend, "req-race")
    argv = ["-m", "perdure", "approve", "req-race", "--request", first, "--url", processes.url]
    racers = [processes.spawn(*argv, "--by", name) for name in ("ann", "bob")]
    codes = sorted(proc.wait() for proc in racers)
    outputs = [proc.output() for proc in racers]
    assert codes == [0, 5], outputs  # 5: the invalid-state exit code
    assert sum("no approval request" in out for out in outputs) == 1, outputs
    second = await pending(perdure_backend, "req-race", first)
    history = await perdure_backend.history("req-race")
    (received,) = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert received.data["request_id"] == first
    assert received.data["sent_by"] in ("ann", "bob")
    await perdure.approve("req-race", second, by="cy", url=perdure_backend.url)
    await run


@pytest.mark.perdure_not_on("memory", reason="the CLI runs in another process")
async def test_the_cli_shows_the_pending_request_and_answers_that_one(
    perdure_backend: Any, processes: Processes
) -> None:
    run = drive(perdure_backend, "req-cli")
    first = await pending(perdure_backend, "req-cli")
    listed = processes.cli("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["waiting_for"], row["request_id"]) == ("approval", first)
    shown = processes.cli("runs", "show", "req-cli")
    assert shown.returncode == 0, shown.stderr
    assert f"request {first}" in shown.stdout
    approved = processes.cli("approve", "req-cli", "--by", "ann")
    assert approved.returncode == 0, approved.stderr
    assert f"approved request {first} of run req-cli as ann" in approved.stdout
    assert "amount=5" in approved.stdout  # what was approved, shown before answering
    second = await pending(perdure_backend, "req-cli", first)
    stale = processes.cli("reject", "req-cli", "--request", first, "--by", "ann")
    assert stale.returncode == 5
    assert f"no approval request {first!r} is pending" in stale.stdout + stale.stderr
    assert (await perdure_backend.get_run("req-cli")).request_id == second
    await perdure.approve("req-cli", second, by="ann", url=perdure_backend.url)
    await run


def test_the_temporal_workflow_restates_the_approval_channel_exactly() -> None:
    """The Temporal workflow imports only the standard library, so it restates the
    channel naming; it must agree with ``perdure._semantics.approvals``."""
    from perdure_temporal import workflow

    assert workflow.APPROVAL == approvals.APPROVAL
    assert approvals.channel("abc") == workflow.CHANNEL + "abc"
