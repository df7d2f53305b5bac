"""DurableRunner in one process, on every store: same results as ``Runner``, recorded
steps, approvals, agents as tools, handoffs, streaming, sessions and clear errors."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import agent_scenarios as sc
import pytest
from agents import Agent, FunctionTool, Runner, function_tool
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

import perdure
from perdure import ConfigurationError, EventKind, RunStatus
from perdure._authorization import AuthenticationError, AuthorizationError
from perdure._tokens import issue_token
from perdure.testing import Receiver, wait_for_status
from perdure_openai_agents import (
    DurableRunner,
    DurableRunResult,
    PerdureSession,
    durable_tool,
)
from perdure_openai_agents._workflow import LOCAL
from perdure_openai_agents.testing import ConversationModel, tool_call


@pytest.fixture(autouse=True)
def receiver_env(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tools of this process post to the test's receiver, like workers' tools do."""
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


@pytest.fixture(autouse=True)
async def closed_backends() -> Any:
    yield
    await perdure.shutdown()


def steps(history: list[Any]) -> list[str]:
    return [e.step_key for e in history if e.kind is EventKind.STEP_COMPLETED]


async def test_a_durable_run_gives_what_runner_gives(perdure_backend: Any) -> None:
    plain = await Runner.run(sc.parallel_agent, "order P")
    durable = await DurableRunner.run(sc.parallel_agent, "order P", backend=perdure_backend)
    assert isinstance(durable, DurableRunResult)
    assert durable.final_output == plain.final_output == "a:P b:P P"
    assert durable.to_input_list() == plain.to_input_list()
    assert [type(i).__name__ for i in durable.new_items] == [
        type(i).__name__ for i in plain.new_items
    ]
    assert durable.context_wrapper.usage.requests == plain.context_wrapper.usage.requests
    assert durable.last_agent.name == "parallel"
    info = await perdure_backend.get_run(durable.run_id)
    assert info.status is RunStatus.SUCCEEDED
    assert info.result["final_output"] == "a:P b:P P"
    assert sorted(steps(await perdure_backend.history(durable.run_id))) == [
        "1.1:model",
        "1.2.1:tool:para_a",
        "1.3.1:tool:para_b",
        "2:model",
        "3.1:tool:lookup",
        "4:model",
    ]


def test_run_sync_generates_a_run_id(perdure_url: str, receiver: Receiver) -> None:
    result = DurableRunner.run_sync(sc.refund_agent, "order S", url=perdure_url)
    assert result.final_output == "refunded order S: charge charge-S-1, mail email-S-1"
    assert len(result.run_id) == 32
    # Starting again with the same id returns the recorded run: nothing runs again.
    again = DurableRunner.run_sync(
        sc.refund_agent, "order S", url=perdure_url, run_id=result.run_id
    )
    assert again.final_output == result.final_output
    assert again.run_id == result.run_id
    assert receiver.requests["model-S"] == 4
    assert receiver.applied["charge-S"] == 1


async def test_approval_in_process_and_the_rejection_message_reaches_the_model(
    perdure_backend: Any, receiver: Receiver
) -> None:
    handle = await DurableRunner.start(
        sc.approval_agent, "order R", run_id="r-reject", backend=perdure_backend
    )
    assert handle.run_id == "r-reject"
    info = await wait_for_status(perdure_backend, "r-reject", [RunStatus.SUSPENDED])
    assert info.attention is not None and info.attention["tool"] == "refund"
    assert await handle.status() is RunStatus.SUSPENDED
    await handle.reject(by="bob", message="refunds are frozen")
    result = await handle.result(timeout=60)
    assert result.final_output == "order R: refunds are frozen"
    assert receiver.requests["refund-R"] == 0
    assert receiver.requests["model-R"] == 3
    signal = [e for e in await handle.history() if e.kind is EventKind.SIGNAL_RECEIVED]
    assert signal[0].data["sent_by"] == "bob"


async def test_handle_approve_goes_through_the_authorizer_and_records_its_decision(
    perdure_backend: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.b64encode(b"h" * 32).decode()
    monkeypatch.setenv("PERDURE_AUTHORIZER", "token")
    monkeypatch.setenv("PERDURE_AUTH_KEY", key)
    monkeypatch.delenv("PERDURE_TOKEN", raising=False)
    handle = await DurableRunner.start(
        sc.approval_agent, "order A", run_id="r-authorized", backend=perdure_backend
    )
    info = await wait_for_status(perdure_backend, "r-authorized", [RunStatus.SUSPENDED])
    with pytest.raises(AuthenticationError, match="requires a signed token"):
        await handle.approve(by="mallory")
    with pytest.raises(AuthorizationError, match="verbs scope"):
        await handle.approve(token=issue_token("bob", verbs=["reject"]))
    with pytest.raises(AuthorizationError, match="verbs scope"):
        await handle.cancel(token=issue_token("bob", verbs=["reject"]))
    assert (await handle.info()).request_id == info.request_id  # still pending
    answered = await handle.approve(token=issue_token("ann", verbs=["approve"]))
    assert answered == info.request_id
    result = await handle.result(timeout=60)
    assert result.final_output == "order A: refunded 4200 as refund-A-1"
    (signal,) = [e for e in await handle.history() if e.kind is EventKind.SIGNAL_RECEIVED]
    assert signal.data["sent_by"] == "ann"
    assert signal.data["request_id"] == answered
    assert signal.data["decision"]["verified"] is True


async def test_the_sdk_approval_flow_still_works_for_plain_runner(
    perdure_backend: Any, receiver: Receiver
) -> None:
    durable = await DurableRunner.run(sc.refund_agent, "order D", backend=perdure_backend)
    assert durable.final_output.startswith("refunded order D")  # the durable-aware runner
    # (perdure's hook on the SDK's default runner) is installed now
    first = await Runner.run(sc.approval_agent, "order U")
    assert [i.tool_name for i in first.interruptions] == ["refund"]
    state = await RunState.from_string(sc.approval_agent, first.to_state().to_string())
    state.approve(state.get_interruptions()[0])
    done = await Runner.run(sc.approval_agent, state)
    assert done.final_output == "order U: refunded 4200 as refund-U-1"
    assert receiver.applied["refund-U"] == 1


async def test_agents_as_tools_and_handoffs_are_recorded_and_replayed(
    perdure_backend: Any, receiver: Receiver
) -> None:
    handle = await DurableRunner.start(
        sc.triage, "order T", run_id="r-graph", backend=perdure_backend
    )
    info = await wait_for_status(perdure_backend, "r-graph", [RunStatus.SUSPENDED])
    assert info.attention is not None and info.attention["agent"] == "billing"
    await handle.approve(by="carol")
    result = await handle.result(timeout=60)
    assert result.final_output.startswith("billing closed T after research: ")
    assert result.last_agent_name == "billing"
    # The approval made this process replay the whole graph: nothing ran twice.
    assert receiver.requests["model-T"] == 6  # triage, researcher, billing: 2 calls each
    assert receiver.applied["lookup-T"] == 1
    assert receiver.applied["close-T"] == 1
    assert steps(await handle.history()) == [
        "1.1:model",  # triage asks for the researcher
        "1.2.1:model",  # the nested run: its model call ...
        "1.2.2.1:tool:lookup",  # ... its tool call ...
        "1.3.1:model",  # ... and its answer
        "2:model",  # triage hands off
        "3:model",  # billing asks to close the ticket -> approval at 4
        "5.1:tool:close_ticket",
        "6:model",
    ]


async def test_streaming_records_live_and_a_replay_does_not_repeat_events(
    perdure_backend: Any, receiver: Receiver
) -> None:
    streamed = DurableRunner.run_streamed(
        sc.approval_agent,
        "order V",
        run_id="r-stream",
        backend=perdure_backend,
        approvals="durable",
    )

    async def approve_when_asked() -> None:
        await wait_for_status(perdure_backend, "r-stream", [RunStatus.SUSPENDED])
        await perdure_backend.signal("r-stream", perdure.APPROVAL, {"approved": True}, by="ann")

    approver = asyncio.ensure_future(approve_when_asked())
    seen: Counter[str] = Counter()
    text = ""
    async for event in streamed.stream_events():
        if event.type == "raw_response_event":
            seen[f"raw:{event.data.type}"] += 1
            if event.data.type == "response.output_text.delta":
                text += event.data.delta
        elif event.type == "run_item_stream_event":
            seen[f"item:{event.name}"] += 1
    await approver
    assert streamed.is_complete
    assert streamed.final_output == text == "order V: refunded 4200 as refund-V-1"
    assert seen["item:tool_called"] == 2  # lookup, refund: each once, none replayed
    assert seen["item:tool_output"] == 2
    assert seen["raw:response.completed"] == 3
    assert receiver.requests["model-V"] == 3
    assert steps(await perdure_backend.history("r-stream")) == [
        "1.1:model",
        "2.1:tool:lookup",
        "3.1:model",
        "5.1:tool:refund",
        "6.1:model",
    ]


async def test_session_items_are_written_once_per_step(
    perdure_backend: Any, perdure_url: str
) -> None:
    session = PerdureSession("s-H")
    first = await DurableRunner.run(
        sc.session_agent, "order H", session=session, backend=perdure_backend
    )
    assert first.final_output == "turn 1 done for H"
    second = await DurableRunner.run(
        sc.session_agent, "order H", session=session, backend=perdure_backend
    )
    assert second.final_output == "turn 2 done for H"
    items = await PerdureSession("s-H", url=perdure_url).get_items()
    kinds = [i.get("type") or i.get("role") for i in items]
    assert (
        kinds
        == [
            "user",
            "function_call",
            "function_call_output",
            "function_call",
            "function_call_output",
            "message",
        ]
        * 2
    )
    call_ids = [i["call_id"] for i in items if i.get("type") == "function_call"]
    assert len(set(call_ids)) == 4
    keys = steps(await perdure_backend.history(second.run_id))
    assert keys[0] == "1:session:get_items" and "session:add_items" in keys[-1]
    assert await session.pop_item() == items[-1]
    assert len(await session.get_items()) == 11
    await session.clear_session()
    assert await session.get_items() == []
    await session.close()


def _local_agent() -> Agent[Any]:
    return Agent(name="local", model=ConversationModel(lambda conv: "hi"))


async def test_bad_input_gets_a_clear_error(perdure_backend: Any) -> None:
    with pytest.raises(ConfigurationError, match="needs an Agent"):
        await DurableRunner.run("not an agent", "hi", backend=perdure_backend)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no attribute"):
        await DurableRunner.run(
            _local_agent(), "hi", agent_ref=f"{__name__}:nowhere", backend=perdure_backend
        )
    with pytest.raises(ConfigurationError, match="approvals must be"):
        await DurableRunner.run(
            _local_agent(),
            "hi",
            approvals="later",  # type: ignore[arg-type]
            backend=perdure_backend,
        )


async def test_per_request_agents_and_live_contexts_run_in_process(perdure_backend: Any) -> None:
    agent = _local_agent()  # no module-level agent: fine for a run this process drives
    live = object()  # a context holding a live object: not persisted, still passed as is
    seen: list[Any] = []

    def respond(conv: Any) -> str:
        return "hi"

    result = await DurableRunner.run(agent, "hello", context=live, backend=perdure_backend)
    assert result.final_output == "hi"
    assert result.last_agent is agent
    assert result.context_wrapper.context is live
    seen.append(respond)


sent: list[str] = []


async def _send(ctx: Any, args: str) -> str:
    key = perdure.idempotency_key()
    sent.append(key)
    return f"sent {json.loads(args)['to']}"


hand_built = durable_tool(
    FunctionTool(
        name="send",
        description="Send a message.",
        params_json_schema={
            "type": "object",
            "properties": {"to": {"type": "string"}},
            "required": ["to"],
            "additionalProperties": False,
        },
        on_invoke_tool=_send,
    ),
    kind="effect",
)


@function_tool
def whoami() -> str:
    """The idempotency key of this tool call."""
    return perdure.idempotency_key()


sender = Agent(
    name="sender",
    model=ConversationModel(
        lambda conv: (
            tool_call("send", {"to": "ann"})
            if not conv.called("send")
            else tool_call("whoami")
            if not conv.called("whoami")
            else f"{conv.output_of('send')} as {conv.output_of('whoami')}"
        )
    ),
    tools=[hand_built, whoami],
)


async def test_durable_tool_applies_intent_before_action(perdure_backend: Any) -> None:
    sent.clear()
    result = await DurableRunner.run(sender, "go", run_id="r-send", backend=perdure_backend)
    assert result.final_output == "sent ann as r-send:3.1:tool:whoami"
    assert sent == ["r-send:1.2.1:tool:send"]
    history = await perdure_backend.history("r-send")
    intents = [e.step_key for e in history if e.kind is EventKind.INTENT]
    assert intents == ["1.2.1:tool:send"]
    effect = next(
        e for e in history if e.step_key == "1.2.1:tool:send" and e.kind is EventKind.STEP_COMPLETED
    )
    assert effect.data["kind"] == "effect"


async def test_a_process_without_the_starters_objects_rebuilds_them_from_the_run(
    perdure_backend: Any, receiver: Receiver, perdure_url: str
) -> None:
    handle = await DurableRunner.start(
        sc.context_agent,
        "order W",
        run_id="r-rebuild",
        context=sc.Ctx(user="ann"),
        hooks=sc.counting_hooks,
        session=PerdureSession("s-W"),
        backend=perdure_backend,
    )
    await wait_for_status(perdure_backend, "r-rebuild", [RunStatus.SUSPENDED])
    info = await handle.info()
    spec = info.input["args"][0]
    assert spec["agent"] == "agent_scenarios:context_agent"
    assert spec["hooks"] == "agent_scenarios:counting_hooks"
    assert spec["session"] == {"kind": "perdure", "session_id": "s-W", "url": None}
    # Forget what the starting process held, as a worker would not have it.
    LOCAL.clear()
    await handle.approve(by="ops")
    result = await handle.result(timeout=60)
    assert result.final_output == "Ctx:ann refunded 1 as refund-W-1"
    assert receiver.requests["model-W"] == 3
    assert sc.counting_hooks.llm_starts >= 3  # hooks also see replayed model calls
    items = await PerdureSession("s-W", url=perdure_url).get_items()
    assert [i.get("type") or i.get("role") for i in items][-1] == "message"


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


scripted_agent = Agent(name="ops", model=ScriptedModel([]), tools=[delete_file])


async def test_scripted_model_calls_are_recorded_and_never_repeated(perdure_backend: Any) -> None:
    scripted_agent.model = model = ScriptedModel(
        [
            [function_call("delete_file", {"path": "/tmp/x"}, call_id="call_del")],
            [assistant_message("File deleted.")],
        ]
    )
    handle = await DurableRunner.start(scripted_agent, "delete /tmp/x", backend=perdure_backend)
    await wait_for_status(perdure_backend, handle.run_id, [RunStatus.SUSPENDED])
    await handle.approve(by="ops")
    result = await handle.result(timeout=60)  # a replay: model call 1 comes from history
    assert result.final_output == "File deleted."
    model.assert_complete()  # each scripted step was used once: none was asked for again
