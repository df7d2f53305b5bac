"""Durable LangGraph threads killed with SIGKILL at exact points, then resumed by a worker.

A drive process (``python -m graph_scenarios many ...``) starts several threads at once;
the receiver holds one request of each, so when all are held the process is killed with
every thread at its own point. One ``perdure worker graph_scenarios`` then recovers them
all. Effects are counted by the receiver, outside both processes.
"""

from __future__ import annotations

import json
from typing import Any

import graph_scenarios as sc
import pytest
from langchain_core.messages import AIMessage, HumanMessage

import perdure
from perdure import EventKind, RunStatus
from perdure.testing import (
    Processes,
    Receiver,
    wait_for_status,
    wait_for_step,
)

STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)
#: A killed drive's lease must expire and a fresh worker import LangGraph before it
#: resumes: on a loaded machine that takes longer than the helper's default minute.
RECOVERY = 180.0


async def test_sigkill_inside_nodes_and_between_supersteps_then_a_worker_resumes(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    holds = {
        # charge node started, after lookup's superstep was checkpointed: nothing applied
        "between": receiver.hold("charge-A", "before"),
        # inside the charge node, after the payment service applied the charge
        "idempotent": receiver.hold("charge-B", "after"),
        # inside the email node, after the relay sent the mail
        "non_idempotent": receiver.hold("email-C", "after"),
        # para_a in flight while para_b, in the same superstep, completed
        "parallel": receiver.hold("para_a-D", "before"),
        # Functional API: inside a @task, after the payment service applied the charge
        "functional": receiver.hold("charge-F", "after"),
    }
    driver = processes.spawn(
        "-m",
        "graph_scenarios",
        "many",
        "refund:g-between:A",
        "refund:g-idem:B",
        "refund:g-nonidem:C",
        "parallel:g-para:D",
        "functional:g-func:F",
    )
    for hold in holds.values():
        receiver.wait_held(hold)
    await wait_for_step(perdure_backend, "g-para#1", lambda key: key.endswith(":para_b"))
    driver.kill()
    holds["between"].drop()
    holds["parallel"].drop()
    holds["idempotent"].release.set()
    holds["non_idempotent"].release.set()
    holds["functional"].release.set()
    assert receiver.applied["charge-B"] == 1
    assert receiver.applied["email-C"] == 1

    processes.worker("graph_scenarios")
    runs = {
        rid: await wait_for_status(perdure_backend, f"{rid}#1", STOPPED, timeout=RECOVERY)
        for rid in ("g-between", "g-idem", "g-nonidem", "g-para", "g-func")
    }

    # Killed as the charge node started: the graph continues from lookup's checkpoint.
    info = runs["g-between"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["log"] == ["lookup A", "charge charge-A-1", "email email-A-1"]
    assert receiver.applied["lookup-A"] == 1  # not a recorded step: the checkpoint held
    assert receiver.requests["charge-A"] == 2  # the killed request died in flight
    assert receiver.applied["charge-A"] == 1

    # Killed inside the node after an idempotent effect: retried with the same key.
    info = runs["g-idem"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["log"] == ["lookup B", "charge charge-B-1", "email email-B-1"]
    assert receiver.requests["charge-B"] == 2
    assert receiver.applied["charge-B"] == 1
    [key] = set(receiver.keys["charge-B"])
    assert key.startswith("g-idem#1:~g-idem#1/charge|") and key.endswith(":charge")
    assert receiver.applied["lookup-B"] == 1

    # Killed inside the node after a non-idempotent effect: parked, never repeated.
    info = runs["g-nonidem"]
    assert info.status is RunStatus.NEEDS_ATTENTION, (info.error, info.attention)
    assert info.attention is not None
    assert info.attention["reason"] == "unknown-outcome"
    assert info.attention["step_key"].startswith("~g-nonidem#1/email|")
    assert receiver.requests["email-C"] == 1
    assert receiver.applied["charge-C"] == 1

    # Parallel branches: the completed one is not repeated, the killed one runs once.
    info = runs["g-para"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert sorted(info.result["log"]) == ["a para_a-D-1", "b para_b-D-1", "join"]
    assert receiver.applied["para_b-D"] == 1
    assert receiver.applied["para_a-D"] == 1
    assert receiver.applied["join-D"] == 1

    # Functional API: the entrypoint re-runs, the @task's charge is retried with its key.
    info = runs["g-func"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result == {"order": "F", "charge": "charge-F-1", "email": "email-F-1"}
    assert receiver.requests["charge-F"] == 2
    assert receiver.applied["charge-F"] == 1
    assert receiver.applied["email-F"] == 1


async def test_interrupted_thread_survives_process_exit_and_a_renamed_node_is_refused(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    # Process 1 starts two threads; both stop at the review interrupt; the process exits.
    first = processes.spawn(
        "-m",
        "graph_scenarios",
        "many",
        "review:g-approve:E",
        "review:g-renamed:R",
        "twice:g-twice:T",
    )
    assert first.wait() == 0, first.output()
    info = await perdure_backend.get_run("g-approve#1")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "approval"

    # The pending interrupt is listed with its value.
    listed = processes.cli("runs", "list", "--status", "suspended", "--json")
    assert listed.returncode == 0, listed.stderr
    pending = {r["run_id"]: r["attention"] for r in map(json.loads, listed.stdout.splitlines())}
    assert pending["g-approve#1"]["tool"] == "refund"
    assert pending["g-approve#1"]["arguments"] == {"order": "E", "cents": 4200}
    assert len(pending["g-approve#1"]["interrupts"]) == 1

    # Process 2 approves from the CLI; process 3, a worker, finishes the thread. The
    # worker also takes up g-twice, approved from here, and dies right after its charge,
    # between the two interrupts of one node.
    done = processes.cli("approve", "g-approve#1", "--by", "alice", "--message", "fine")
    assert done.returncode == 0, done.stderr
    hold = receiver.hold("charge-T", "after")
    await perdure_backend.signal("g-twice#1", "approval", {"approved": True}, by="frank")
    worker = processes.worker("graph_scenarios")
    info = await wait_for_status(perdure_backend, "g-approve#1", STOPPED, timeout=RECOVERY)
    receiver.wait_held(hold)
    worker.kill()
    hold.release.set()
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["log"] == [
        "lookup E",
        "review prepare-E-1 True",
        "charge charge-E-1",
        "email email-E-1",
    ]
    assert receiver.applied["lookup-E"] == 1
    assert receiver.applied["prepare-E"] == 1  # the node re-ran; its step did not
    assert receiver.applied["charge-E"] == 1
    history = await perdure_backend.history("g-approve#1")
    [received] = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert received.data["sent_by"] == "alice"
    assert received.data["payload"] == {"approved": True, "message": "fine"}
    assert received.step_key.startswith("~g-approve#1/interrupt/")

    # A worker whose graph renamed g-renamed's interrupted node refuses to continue it,
    # naming the node; it recovers g-twice, which the rename does not touch.
    await perdure_backend.signal("g-renamed#1", "approval", {"approved": True}, by="carol")
    processes.worker("graph_scenarios", env={"GRAPH_VARIANT": "v2"})
    info = await wait_for_status(perdure_backend, "g-renamed#1", STOPPED)
    assert info.status is RunStatus.NEEDS_ATTENTION, (info.error, info.attention)
    assert info.attention is not None
    assert info.attention["reason"] == "determinism"
    assert info.attention["step_key"] == "node:review"
    assert "review_v2" in info.attention["message"]
    assert receiver.applied["charge-R"] == 0

    # g-twice resumed inside its node: the recorded first answer is replayed, the charge
    # retried with its key (applied once), and the second interrupt waits for its answer.
    info = await wait_for_status(perdure_backend, "g-twice#1", (RunStatus.SUSPENDED,))
    assert info.attention is not None and info.attention["question"] == "second"
    await perdure_backend.signal("g-twice#1", "approval", "ok", by="frank")
    info = await wait_for_status(perdure_backend, "g-twice#1", STOPPED)
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["log"] == ["{'approved': True} charge-T-1 ok"]
    assert receiver.requests["charge-T"] == 2
    assert receiver.applied["charge-T"] == 1
    history = await perdure_backend.history("g-twice#1")
    received = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert [e.data["payload"] for e in received] == [{"approved": True}, "ok"]


async def test_a_chat_thread_survives_a_sigkill_in_turn_two_and_an_approval_on_turn_two(
    perdure_backend: Any,
    perdure_url: str,
    receiver: Receiver,
    processes: Processes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Thread g-chat: turn 1 ends, turn 2 dies right after the CRM recorded its message.
    hold = receiver.hold("notify-g-chat-refund", "after")
    driver = processes.spawn("-m", "graph_scenarios", "chat", "g-chat", "hi", "refund")
    receiver.wait_held(hold)
    driver.kill()
    hold.release.set()
    assert receiver.applied["notify-g-chat-refund"] == 1
    # Thread g-gate: turn 2 stops before notify (interrupt_before, at call time); the
    # process exits with the turn suspended.
    gate = processes.spawn("-m", "graph_scenarios", "chat", "g-gate", "hi", "refund!")
    assert gate.wait() == 0, gate.output()
    info = await perdure_backend.get_run("g-gate#2")
    assert info.status is RunStatus.SUSPENDED, (info.error, info.attention)
    assert info.attention is not None and info.attention["kind"] == "langgraph_breakpoint"
    assert info.attention["next"] == ["notify"]
    assert receiver.requests["notify-g-gate-refund"] == 0
    done = processes.cli("approve", "g-gate#2", "--by", "alice")
    assert done.returncode == 0, done.stderr

    # A worker finishes both second turns: the CRM got each message once.
    processes.worker("graph_scenarios")
    for run_id in ("g-chat#2", "g-gate#2"):
        info = await wait_for_status(perdure_backend, run_id, STOPPED, timeout=RECOVERY)
        assert info.status is RunStatus.SUCCEEDED, (run_id, info.error, info.attention)
    assert (await perdure_backend.get_run("g-chat#1")).status is RunStatus.SUCCEEDED
    assert receiver.requests["notify-g-chat-refund"] == 2  # the killed one, then its retry
    assert receiver.applied["notify-g-chat-refund"] == 1
    assert receiver.applied["notify-g-gate-refund"] == 1
    assert receiver.applied["notify-g-chat-hi"] == 1

    monkeypatch.setenv("PERDURE_URL", perdure_url)
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    try:
        cfg: Any = {"configurable": {"thread_id": "g-chat"}}
        # the caller re-sends turn 2 (its request died with the process): it attaches to
        # the turn the worker finished and gets LangGraph's output, messages as objects
        again = await sc.chat_graph.ainvoke({"messages": [HumanMessage("refund")]}, cfg)
        assert [type(m) for m in again["messages"]] == [
            HumanMessage,
            AIMessage,
            AIMessage,
            HumanMessage,
            AIMessage,
            AIMessage,
        ]
        assert again["messages"][-1].content == "noted notify-g-chat-refund-1"
        # turn 3 sees the whole conversation
        third = await sc.chat_graph.ainvoke({"messages": [HumanMessage("bye")]}, cfg)
        assert third["messages"][-2].content == "heard hi / refund / bye"
        assert len(third["messages"]) == 9
        gate = await sc.chat_graph.ainvoke(
            {"messages": [HumanMessage("bye")]}, {"configurable": {"thread_id": "g-gate"}}
        )
        assert [m.content for m in gate["messages"] if isinstance(m, HumanMessage)] == [
            "hi",
            "refund",
            "bye",
        ]
        assert gate["messages"][-1].content == "noted notify-g-gate-bye-1"
        history = await perdure_backend.history("g-gate#2")
        [received] = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
        assert received.data["sent_by"] == "alice"
    finally:
        await sc.chat_graph.aclose()
        await perdure.shutdown()
