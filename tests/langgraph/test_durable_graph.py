"""``durable(graph)`` in one process: results equal the plain graph's, every thread is a
perdure run, effects inside nodes are journaled under task keys, interrupts suspend."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import graph_scenarios as sc
import pytest
from langgraph.types import Command

import perdure
from perdure import ConfigurationError, EventKind, RunStatus
from perdure._authorization import AuthenticationError
from perdure.testing import Receiver
from perdure_langgraph.durable import WORKFLOW_NAME, DurableGraph, durable


@pytest.fixture
async def env(
    perdure_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """The scenario graphs on ``perdure_url``, effects counted by ``receiver``."""
    monkeypatch.setenv("PERDURE_URL", perdure_url)
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    try:
        yield perdure_url
    finally:
        for graph in sc.GRAPHS.values():
            await graph.aclose()  # this loop's async pools too, before the loop closes
        await perdure.shutdown()


def cfg(thread: str, **extra: Any) -> dict[str, Any]:
    """The thread's config; its answers (``Command(resume=...)``) are given as ``ops``."""
    return {"configurable": {"thread_id": thread, "perdure_by": "ops", **extra}}


def completed(history: list[Any]) -> list[str]:
    return [e.step_key for e in history if e.kind is EventKind.STEP_COMPLETED]


async def test_refund_graph_equals_the_plain_graph_and_is_a_run(
    env: str, receiver: Receiver
) -> None:
    out = await sc.refund_graph.ainvoke({"order": "H", "log": []}, cfg("t-happy"))
    plain = await sc.build_refund().compile().ainvoke({"order": "P", "log": []})
    assert out == {"order": "H", "log": ["lookup H", "charge charge-H-1", "email email-H-1"]}
    assert [line.replace("P", "H") for line in plain["log"]] == out["log"]

    info = await perdure.get_run("t-happy#1")
    assert info.status is RunStatus.SUCCEEDED
    assert info.workflow == WORKFLOW_NAME
    assert info.result == out
    steps = completed(await perdure.history("t-happy#1"))
    # one keyed step per effect: thread / node namespace with its task id / order in node
    assert [s.rsplit(":", 1)[1] for s in steps] == ["charge", "email"]
    assert all(
        s.startswith("~t-happy#1/charge|") or s.startswith("~t-happy#1/email|") for s in steps
    )
    assert receiver.keys["charge-H"] == [f"t-happy#1:{steps[0]}"]
    # the graph's state is on the durable checkpointer
    state = await sc.refund_graph.aget_state(cfg("t-happy"))
    assert state.values == out and state.next == ()
    assert len(list(sc.refund_graph.get_state_history(cfg("t-happy")))) == 5

    # starting is idempotent: the same thread id returns the recorded result
    again = await sc.refund_graph.ainvoke({"order": "H", "log": []}, cfg("t-happy"))
    assert again == out
    assert receiver.applied["charge-H"] == 1


async def test_interrupt_suspends_and_command_resume_finishes(
    env: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PERDURE_ACTOR", raising=False)
    out = await sc.review_graph.ainvoke({"order": "I", "log": []}, cfg("t-review"))
    assert [i.value["tool"] for i in out["__interrupt__"]] == ["refund"]
    info = await perdure.get_run("t-review#1")
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == "approval"
    assert info.attention is not None
    assert info.attention["tool"] == "refund"
    assert info.attention["interrupts"][0]["id"] == out["__interrupt__"][0].id

    # An answer through invoke is an approval like any other: it needs an identity.
    unnamed = {"configurable": {"thread_id": "t-review"}}
    with pytest.raises(AuthenticationError, match="identity is required to approve"):
        await sc.review_graph.ainvoke(Command(resume={"approved": True}), unnamed)
    done = await sc.review_graph.ainvoke(Command(resume={"approved": True}), cfg("t-review"))
    assert done["log"] == [
        "lookup I",
        "review prepare-I-1 True",
        "charge charge-I-1",
        "email email-I-1",
    ]
    # the step before interrupt() ran once although the node ran twice
    assert receiver.applied["prepare-I"] == 1
    history = await perdure.history("t-review#1")
    received = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert len(received) == 1 and received[0].data["payload"] == {"approved": True}
    assert received[0].data["sent_by"] == "ops"
    assert "perdure_by" not in json.dumps(info.input)  # who answers is not the turn's input


async def test_reject_from_the_api_ends_without_charging(env: str, receiver: Receiver) -> None:
    await sc.review_graph.ainvoke({"order": "J", "log": []}, cfg("t-reject"))
    await perdure.reject("t-reject#1", by="bob", message="no")
    backend = await perdure.connect()
    info = await backend.wait("t-reject#1")
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["approved"] is False
    assert receiver.applied["charge-J"] == 0
    history = await perdure.history("t-reject#1")
    [received] = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert received.data["sent_by"] == "bob"


async def test_parallel_send_subgraph_and_functional(env: str, receiver: Receiver) -> None:
    para = await sc.parallel_graph.ainvoke(sc.graph_input("parallel", "K"), cfg("t-para"))
    assert sorted(para["log"]) == ["a para_a-K-1", "b para_b-K-1", "join"]

    sent = await sc.send_graph.ainvoke(sc.graph_input("send", "L"), cfg("t-send"))
    assert sorted(sent["log"]) == ["charge charge-L1-1", "charge charge-L2-1"]
    keys = completed(await perdure.history("t-send#1"))
    assert len(keys) == 2 and all(k.startswith("~t-send#1/charge_one|") for k in keys)

    nested = await sc.nested_graph.ainvoke(sc.graph_input("nested", "M"), cfg("t-nested"))
    assert nested["log"] == ["lookup M", "charge charge-M-1", "email email-M-1", "done"]
    keys = completed(await perdure.history("t-nested#1"))
    # the subgraph's tasks have their own keys, below the parent task's namespace
    assert [k.rsplit(":", 1)[1] for k in keys] == ["charge", "email"]
    assert all(k.startswith("~t-nested#1/refund|") and k.count("|") >= 3 for k in keys), keys

    func = await sc.functional_graph.ainvoke("N", cfg("t-func"))
    assert func == {"order": "N", "charge": "charge-N-1", "email": "email-N-1"}
    keys = completed(await perdure.history("t-func#1"))
    assert [k.rsplit(":", 1)[1] for k in keys] == ["charge", "email"]
    assert any("charge_task|" in k for k in keys) and any("email_task|" in k for k in keys)


async def test_several_interrupts_are_answered_by_id_and_in_turn(
    env: str, receiver: Receiver
) -> None:
    out = await sc.questions_graph.ainvoke({"order": "Q", "log": []}, cfg("t-q"))
    ids = {i.value["question"]: i.id for i in out["__interrupt__"]}
    assert set(ids) == {"a", "b"}
    info = await perdure.get_run("t-q#1")
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == "resume"
    assert info.attention is not None
    assert {i["id"] for i in info.attention["interrupts"]} == set(ids.values())

    # A payload keyed by interrupt id answers that interrupt only.
    out = await sc.questions_graph.ainvoke(Command(resume={ids["a"]: "yes"}), cfg("t-q"))
    assert [i.value["question"] for i in out["__interrupt__"]] == ["b"]
    # Any other payload answers every pending interrupt (here the one left); invoking
    # the thread with no input joins it and drives it to its next stop.
    await perdure.signal("t-q#1", "resume", "sure", by="dora")
    out = await sc.questions_graph.ainvoke(None, cfg("t-q"))
    assert [i.value["question"] for i in out["__interrupt__"]] == ["first"]
    assert (await perdure.get_run("t-q#1")).waiting_for == "approval"
    await perdure.approve("t-q#1", by="erin")
    out = await sc.questions_graph.ainvoke(None, cfg("t-q"))
    assert [i.value["question"] for i in out["__interrupt__"]] == ["second"]
    out = await sc.questions_graph.ainvoke(Command(resume="second-answer"), cfg("t-q"))
    assert out["log"][-1] == ("{'approved': True, 'message': None} charge-Q-1 second-answer"), out
    assert sorted(out["log"][:2]) == ["a=yes", "b=sure"]
    assert receiver.applied["prepare-Q"] == 1  # ask_b re-ran twice; its step ran once
    assert receiver.applied["charge-Q"] == 1  # ask_twice re-ran; its effect ran once
    history = await perdure.history("t-q#1")
    senders = [e.data["sent_by"] for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert senders == ["ops", "dora", "erin", "ops"]  # invoke answers as perdure_by


async def test_astream_forwards_chunks_and_sync_invoke_works_in_a_running_loop(
    env: str, receiver: Receiver
) -> None:
    chunks = [
        c
        async for c in sc.refund_graph.astream(
            {"order": "S", "log": []}, cfg("t-stream"), stream_mode="updates"
        )
    ]
    assert [next(iter(c)) for c in chunks] == ["lookup", "charge", "email"]
    # a notebook: sync invoke while an event loop runs here (it runs in a thread)
    out = sc.refund_graph.invoke({"order": "U", "log": []}, cfg("t-sync-in-loop"))
    assert out["log"] == ["lookup U", "charge charge-U-1", "email email-U-1"]


async def test_misuse_gets_clear_errors(env: str) -> None:
    with pytest.raises(ConfigurationError, match="thread_id"):
        await sc.refund_graph.ainvoke({"order": "X", "log": []}, {})
    local = durable(sc.build_refund().compile())
    with pytest.raises(ConfigurationError, match="module-level"):
        await local.ainvoke({"order": "X", "log": []}, cfg("t-local"))
    from langgraph.checkpoint.memory import InMemorySaver

    with pytest.raises(ConfigurationError, match="InMemorySaver"):
        durable(sc.build_refund().compile(checkpointer=InMemorySaver()))
    wrapped = durable(sc.plain_refund)
    assert wrapped.locator() == "graph_scenarios:plain_refund"
    assert sc.refund_graph.locator() == "graph_scenarios:refund_graph"
    assert isinstance(sc.refund_graph, DurableGraph)


def test_sync_invoke_and_stream_run_their_own_loop(
    perdure_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERDURE_URL", perdure_url)
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    try:
        out = sc.refund_graph.invoke({"order": "Y", "log": []}, cfg("t-sync"))
        assert out["log"] == ["lookup Y", "charge charge-Y-1", "email email-Y-1"]
        chunks = list(
            sc.refund_graph.stream({"order": "Z", "log": []}, cfg("t-sync2"), stream_mode="values")
        )
        assert chunks[-1]["log"] == ["lookup Z", "charge charge-Z-1", "email email-Z-1"]
        assert sc.refund_graph.get_state(cfg("t-sync2")).values == chunks[-1]
    finally:
        for graph in sc.GRAPHS.values():
            graph.close()
