"""Agents SDK runs killed with SIGKILL at exact points, then resumed by a worker process.

A drive process (``python -m agent_scenarios many ...``) starts several runs at once;
the receiver holds one request of each, so when all are held the process is killed with
every run at its own point. One ``perdure worker agent_scenarios`` then recovers them
all. Model calls and effects are counted by the receiver, outside both processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import agent_scenarios as sc
import pytest
from agents import InputGuardrailTripwireTriggered, SQLiteSession
from agents.run_state import RunState

from perdure import EventKind, RunStatus
from perdure.testing import (
    Processes,
    Receiver,
    completed_steps,
    wait_for_status,
    wait_for_step,
)
from perdure_openai_agents import DurableRunner, PerdureSession

STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)


async def test_sigkill_at_each_boundary_then_a_worker_resumes_without_repeating_work(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    holds = {
        # between the model call that asks for lookup and the lookup itself
        "between": receiver.hold("lookup-A", "before"),
        # after the payment service applied the charge, before the worker heard back
        "idempotent": receiver.hold("charge-B", "after"),
        # after the mail relay sent the mail, before the worker heard back
        "non_idempotent": receiver.hold("email-C", "after"),
        # para_a of a parallel pair is in flight; para_b completes and is recorded
        "parallel": receiver.hold("para_a-D", "before"),
        # a run keeping its conversation in a PerdureSession, after its charge
        "session": receiver.hold("charge-G", "after"),
    }
    driver = processes.spawn(
        "-m",
        "agent_scenarios",
        "many",
        "refund_agent:r-between:A",
        "refund_agent:r-idem:B",
        "refund_agent:r-nonidem:C",
        "parallel_agent:r-para:D",
        "session_agent:r-sess:G:session=s-G",
    )
    for hold in holds.values():
        receiver.wait_held(hold)
    await wait_for_step(perdure_backend, "r-para", "1.3.1:tool:para_b".__eq__)
    driver.kill()
    holds["between"].drop()
    holds["parallel"].drop()
    holds["idempotent"].release.set()
    holds["non_idempotent"].release.set()
    holds["session"].release.set()
    assert receiver.applied["charge-B"] == 1
    assert receiver.applied["email-C"] == 1

    processes.worker("agent_scenarios")
    runs = {
        rid: await wait_for_status(perdure_backend, rid, STOPPED)
        for rid in ("r-between", "r-idem", "r-nonidem", "r-para", "r-sess")
    }

    # Killed between a model call and its tool call: the model is not asked again.
    info = runs["r-between"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["final_output"] == "refunded order A: charge charge-A-1, mail email-A-1"
    assert receiver.requests["model-A"] == 4  # lookup, charge, email, answer: once each
    assert receiver.requests["lookup-A"] == 2  # the killed request died in flight
    assert receiver.applied["lookup-A"] == 1
    assert receiver.applied["charge-A"] == 1
    assert receiver.applied["email-A"] == 1
    assert completed_steps(await perdure_backend.history("r-between")) == [
        "1.1:model",
        "1.2.1:tool:lookup",
        "2:model",
        "3.1:charge",
        "4:model",
        "5.1:email",
        "6:model",
    ]

    # Killed after an idempotent effect, before its record: retried with the same key.
    info = runs["r-idem"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert receiver.requests["charge-B"] == 2
    assert receiver.applied["charge-B"] == 1
    assert receiver.keys["charge-B"] == ["r-idem:3.1:charge"]
    assert receiver.requests["model-B"] == 4
    assert receiver.applied["email-B"] == 1

    # Killed after a non-idempotent effect, before its record: parked, never repeated.
    info = runs["r-nonidem"]
    assert info.status is RunStatus.NEEDS_ATTENTION, (info.error, info.attention)
    assert info.attention is not None
    assert info.attention["reason"] == "unknown-outcome"
    assert info.attention["step_key"] == "5.1:email"
    assert receiver.requests["email-C"] == 1
    assert receiver.requests["model-C"] == 3
    assert receiver.applied["charge-C"] == 1

    # Parallel tool calls: the recorded one replays, the other runs, at the same keys.
    info = runs["r-para"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["final_output"] == "a:D b:D D"
    assert receiver.applied["para_b-D"] == 1
    assert receiver.applied["para_a-D"] == 1
    assert receiver.requests["model-D"] == 3
    steps = completed_steps(await perdure_backend.history("r-para"))
    assert sorted(steps[1:3]) == ["1.2.1:tool:para_a", "1.3.1:tool:para_b"]
    assert steps[0] == "1.1:model" and steps[3:] == ["2:model", "3.1:tool:lookup", "4:model"]

    # The session holds the conversation once: no item written twice, no orphan call.
    info = runs["r-sess"]
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert receiver.applied["charge-G"] == 1
    items = await PerdureSession("s-G", url=perdure_backend.url).get_items()
    assert [i.get("type") or i.get("role") for i in items] == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs and len(set(calls)) == 2


async def test_approval_survives_process_exit_and_a_changed_agent_is_refused(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    # Process 1 starts two runs; both suspend for approval; the process exits.
    first = processes.spawn(
        "-m",
        "agent_scenarios",
        "many",
        "approval_agent:r-approve:E",
        "changing_agent:r-changed:F",
    )
    assert first.wait() == 0, first.output()
    info = await perdure_backend.get_run("r-approve")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "approval"

    # The pending approval is listed, with the tool and its arguments.
    listed = processes.cli("runs", "list", "--status", "suspended", "--json")
    assert listed.returncode == 0, listed.stderr
    pending = {r["run_id"]: r["attention"] for r in map(json.loads, listed.stdout.splitlines())}
    assert pending["r-approve"]["tool"] == "refund"
    assert pending["r-approve"]["arguments"] == {"order_id": "E", "cents": 4200}
    assert pending["r-approve"]["agent"] == "approvals"

    # Process 2 approves from the CLI; process 3, a worker running changed code, resumes.
    done = processes.cli("approve", "r-approve", "--by", "alice", "--message", "fine")
    assert done.returncode == 0, done.stderr
    await perdure_backend.signal("r-changed", "approval", {"approved": True}, by="alice")
    processes.worker("agent_scenarios", env={"AGENT_VARIANT": "v2"})

    info = await wait_for_status(perdure_backend, "r-approve", STOPPED)
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["final_output"] == "order E: refunded 4200 as refund-E-1"
    assert receiver.requests["model-E"] == 3  # lookup, refund, answer: never twice
    assert receiver.applied["lookup-E"] == 1
    assert receiver.applied["refund-E"] == 1
    assert receiver.keys["refund-E"] == ["r-approve:4.1:tool:refund"]
    history = await perdure_backend.history("r-approve")
    received = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert len(received) == 1
    assert received[0].data["sent_by"] == "alice"
    assert received[0].data["payload"] == {"approved": True, "message": "fine"}
    assert received[0].data["waited"] > 0

    # The agent gained a tool under the in-flight run: replay stops at the first model
    # call, naming it, and the history is left as it was.
    info = await wait_for_status(perdure_backend, "r-changed", STOPPED)
    assert info.status is RunStatus.NEEDS_ATTENTION, (info.error, info.attention)
    assert info.attention is not None
    assert info.attention["reason"] == "determinism"
    assert info.attention["step_key"] == "1.1:model"
    assert "audit" in info.attention["message"]
    assert receiver.applied["refund-F"] == 0
    assert completed_steps(await perdure_backend.history("r-changed")) == [
        "1.1:model",
        "1.2.1:tool:lookup",
        "2:model",
    ]


async def test_a_streamed_run_killed_mid_way_streams_on_for_a_new_consumer(
    perdure_backend: Any,
    receiver: Receiver,
    processes: Processes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    hold = receiver.hold("charge-S", "before")
    driver = processes.spawn("-m", "agent_scenarios", "refund_agent", "r-streamed", "S", "--stream")
    receiver.wait_held(hold)
    driver.kill()
    hold.drop()

    # A new consumer (this process) asks for the same run: it resumes it and streams on.
    streamed = DurableRunner.run_streamed(
        sc.refund_agent, "order S", run_id="r-streamed", backend=perdure_backend
    )
    tools: list[str] = []
    raw: list[str] = []
    text = ""
    async for event in streamed.stream_events():
        if event.type == "raw_response_event":
            raw.append(event.data.type)
            if event.data.type == "response.output_text.delta":
                text += event.data.delta
        elif event.type == "run_item_stream_event" and event.name == "tool_called":
            tools.append(event.item.raw_item.name)
    expected = "refunded order S: charge charge-S-1, mail email-S-1"
    assert streamed.final_output == text == expected
    # The recorded part arrives condensed (one response.completed per recorded model
    # call), then the run continues live from the step the kill interrupted.
    assert tools == ["lookup", "charge", "email"]
    assert raw[:2] == ["response.completed"] * 2
    assert "response.output_text.delta" in raw[2:]
    assert receiver.requests["model-S"] == 4  # no model call repeated
    assert receiver.applied["lookup-S"] == 1
    assert receiver.requests["charge-S"] == 2  # the killed request died in flight
    assert receiver.applied["charge-S"] == 1
    assert receiver.applied["email-S"] == 1


async def test_a_users_sqlite_session_survives_a_sigkill_after_a_tools_effect(
    perdure_backend: Any, receiver: Receiver, processes: Processes, tmp_path: Path
) -> None:
    db = tmp_path / "conversations.db"
    hold = receiver.hold("charge-U", "after")
    driver = processes.spawn(
        "-m", "agent_scenarios", "many", f"session_agent:r-usess:U:sqlite={db}:session=u-U"
    )
    receiver.wait_held(hold)
    driver.kill()
    hold.release.set()
    assert receiver.applied["charge-U"] == 1

    processes.worker("agent_scenarios")
    info = await wait_for_status(perdure_backend, "r-usess", STOPPED)
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["final_output"] == "turn 1 done for U"
    # The user's own session file holds the turn once: nothing duplicated, nothing lost.
    items = await SQLiteSession("u-U", str(db)).get_items()
    assert [i.get("type") or i.get("role") for i in items] == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs and len(set(calls)) == 2
    assert receiver.applied["charge-U"] == 1
    assert receiver.applied["lookup-U"] == 1
    assert receiver.requests["model-U"] == 3  # lookup, charge, answer: once each


async def test_the_sdk_approval_flow_hands_its_run_state_to_another_process(
    perdure_backend: Any,
    receiver: Receiver,
    processes: Processes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    state_file = tmp_path / "state.json"
    # Process 1 runs until the refund needs approval, saves the RunState JSON, is killed.
    saved = receiver.hold("saved-X", "after")
    first = processes.spawn("-m", "agent_scenarios", "sdk-first", "r-sdk-1", "X", str(state_file))
    receiver.wait_held(saved)
    first.kill()
    saved.release.set()
    info = await perdure_backend.get_run("r-sdk-1")
    assert info.status is RunStatus.SUCCEEDED and info.result["interruptions"] == 1
    assert receiver.applied["refund-X"] == 0

    # Process 2 loads the JSON, approves and runs it durably; killed after the refund.
    refunded = receiver.hold("refund-X", "after")
    second = processes.spawn("-m", "agent_scenarios", "sdk-resume", "r-sdk-2", str(state_file))
    receiver.wait_held(refunded)
    second.kill()
    refunded.release.set()

    # A worker finishes the approved run from the RunState the run recorded.
    processes.worker("agent_scenarios")
    info = await wait_for_status(perdure_backend, "r-sdk-2", STOPPED)
    assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
    assert info.result["final_output"] == "order X: refunded 4200 as refund-X-1"
    assert receiver.applied["refund-X"] == 1  # retried with its key after the kill
    assert receiver.requests["model-X"] == 3  # lookup, refund, answer: never twice

    # This process asks for the same run: the SDK's result, rebuilt from the history.
    state = await RunState.from_string(sc.approval_agent, state_file.read_text())
    for item in state.get_interruptions():
        state.approve(item)
    result = await DurableRunner.run(
        sc.approval_agent, state, run_id="r-sdk-2", backend=perdure_backend
    )
    assert result.final_output == "order X: refunded 4200 as refund-X-1"
    assert result.last_agent is sc.approval_agent
    assert [i.type for i in result.new_items][-2:] == [
        "tool_call_output_item",
        "message_output_item",
    ]
    assert receiver.requests["model-X"] == 3 and receiver.requests["refund-X"] == 2


async def test_a_guardrail_tripwire_after_a_worker_resumed_is_raised_as_itself(
    perdure_backend: Any,
    receiver: Receiver,
    processes: Processes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    hold = receiver.hold("screen-K", "before")
    driver = processes.spawn("-m", "agent_scenarios", "many", "guarded_agent:r-guard:K")
    receiver.wait_held(hold)
    driver.kill()
    hold.drop()

    processes.worker("agent_scenarios")
    info = await wait_for_status(perdure_backend, "r-guard", STOPPED)
    assert info.status is RunStatus.FAILED, (info.error, info.attention)

    with pytest.raises(InputGuardrailTripwireTriggered) as caught:
        await DurableRunner.run(
            sc.guarded_agent, "order K", run_id="r-guard", backend=perdure_backend
        )
    assert caught.value.guardrail_result.guardrail is sc.screen
    assert caught.value.guardrail_result.output.output_info == {
        "screened": "K",
        "verdict": "blocked",
    }
    assert receiver.requests["model-K"] == 0  # the guardrail runs first, and trips
