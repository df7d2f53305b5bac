"""A durable thread is a conversation of turns, each a perdure run ``THREAD#n``, and the
LangGraph API a user already calls keeps working on it: message objects and custom state
types, breakpoints, update_state, time travel, context, stream_mode, factories."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import graph_scenarios as sc
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from typed_state import Customer, Order, Tier, round_trip_values

import perdure
from perdure import ConfigurationError, EventKind, InvalidRunStateError, RunStatus
from perdure.testing import Receiver
from perdure_langgraph import DisallowedTypeError, durable, turn_run_id


@pytest.fixture
async def env(
    perdure_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    monkeypatch.setenv("PERDURE_URL", perdure_url)
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    try:
        yield perdure_url
    finally:
        for graph in [*sc.GRAPHS.values(), *GRAPHS]:
            await graph.aclose()
        await perdure.shutdown()


def cfg(thread: str, **extra: Any) -> dict[str, Any]:
    """The thread's config; its answers (``Command(resume=...)``) are given as ``ops``."""
    return {"configurable": {"thread_id": thread, "perdure_by": "ops", **extra}}


def said(out: dict[str, Any]) -> list[str]:
    return [f"{type(m).__name__}:{m.content}" for m in out["messages"]]


# -- graphs of this module (module level, so a worker could find them) ----------------------


class TypedState(TypedDict, total=False):
    customer: Customer
    order: Order
    decision: Customer
    log: list[str]


def typed_node(state: TypedState) -> dict[str, Any]:
    customer = state["customer"]  # a resumed node reads attributes, not dict keys
    decision = interrupt({"question": f"refund {customer.name}?", "customer": customer})
    assert isinstance(decision, Customer), decision
    return {"decision": decision, "log": [f"{customer.name} {customer.tier.value} {decision.name}"]}


def build_typed() -> StateGraph:
    builder = StateGraph(TypedState)
    builder.add_node("ask", typed_node)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


typed_graph = durable(build_typed().compile())


@dataclasses.dataclass
class Tenant:
    name: str


class CountState(TypedDict, total=False):
    n: int
    log: list[str]


def count(state: CountState, runtime: Runtime[Tenant]) -> dict[str, Any]:
    tenant = runtime.context.name if runtime.context is not None else "-"
    return {"n": state.get("n", 0) + 1, "log": [*state.get("log", []), f"{tenant}:{state['n']}"]}


def build_count() -> StateGraph:
    builder = StateGraph(CountState, context_schema=Tenant)
    builder.add_node("count", count)
    builder.add_edge(START, "count")
    builder.add_edge("count", END)
    return builder


count_graph = durable(build_count().compile())


def make_count_graph() -> Any:
    """A factory a worker calls to re-create the graph."""
    return build_count().compile()


def build_nested(inner_node: str) -> Any:
    """outer -> inner (a subgraph whose node ``inner_node`` asks with interrupt())."""
    inner = StateGraph(CountState)
    inner.add_node(inner_node, lambda s: {"log": [*s.get("log", []), f"ok {interrupt('go?')}"]})
    inner.add_edge(START, inner_node)
    inner.add_edge(inner_node, END)
    outer = StateGraph(CountState)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    outer.add_edge("inner", END)
    return outer.compile()


nested_graph = durable(build_nested("ask"))
#: The same graph after a deploy renamed the subgraph's node.
renamed_nested = durable(build_nested("ask_v2"), graph_ref="test_threads:nested_graph")
factory_graph = durable(make_count_graph(), graph_ref="test_threads:make_count_graph")
gated_chat = durable(sc.build_chat().compile(interrupt_before=["notify"]))
GRAPHS = [typed_graph, count_graph, factory_graph, gated_chat, nested_graph, renamed_nested]


# -- turns ------------------------------------------------------------------------------------


async def test_three_turns_continue_one_conversation_with_message_objects(
    env: str, receiver: Receiver
) -> None:
    first = await sc.chat_graph.ainvoke({"messages": [HumanMessage("hi")]}, cfg("chat-1"))
    assert said(first) == [
        "HumanMessage:hi",
        "AIMessage:heard hi",
        "AIMessage:noted notify-chat-1-hi-1",
    ]
    second = await sc.chat_graph.ainvoke({"messages": [HumanMessage("refund")]}, cfg("chat-1"))
    assert said(second)[3:] == [
        "HumanMessage:refund",
        "AIMessage:heard hi / refund",
        "AIMessage:noted notify-chat-1-refund-1",
    ]
    # the same call again (a retried request) attaches to the turn it started
    again = await sc.chat_graph.ainvoke({"messages": [HumanMessage("refund")]}, cfg("chat-1"))
    assert said(again) == said(second)
    assert receiver.requests["notify-chat-1-refund"] == 1
    third = await sc.chat_graph.ainvoke({"messages": [HumanMessage("bye")]}, cfg("chat-1"))
    assert len(third["messages"]) == 9
    assert all(isinstance(m, HumanMessage | AIMessage) for m in third["messages"])
    assert third["messages"][-2].content == "heard hi / refund / bye"

    runs = {r.run_id: r for r in await perdure.list_runs() if r.run_id.startswith("chat-1#")}
    assert sorted(runs) == ["chat-1#1", "chat-1#2", "chat-1#3"]
    assert all(r.status is RunStatus.SUCCEEDED for r in runs.values())
    # each turn's checkpoints say which turn wrote them
    history = list(sc.chat_graph.get_state_history(cfg("chat-1")))
    assert {h.metadata.get("perdure_turn") for h in history if h.metadata} == {1, 2, 3}
    # a turn named explicitly attaches to it, rebuilt from its checkpoint
    turn_two = await sc.chat_graph.ainvoke(None, cfg("chat-1", perdure_turn=2))
    assert said(turn_two) == said(second)
    with pytest.raises(ConfigurationError, match="perdure_turn=9"):
        await sc.chat_graph.ainvoke(None, cfg("chat-1", perdure_turn=9))


async def test_types_round_trip_through_input_state_interrupt_and_resume(env: str) -> None:
    values = round_trip_values()
    customer = values["customer"]
    out = await typed_graph.ainvoke({"customer": customer, "order": values["order"]}, cfg("typed"))
    [pending] = out["__interrupt__"]
    assert pending.value["customer"] == customer
    assert isinstance(pending.value["customer"], Customer)
    state = await typed_graph.aget_state(cfg("typed"))
    assert state.values["customer"] == customer and state.values["order"] == values["order"]
    answer = Customer(name="Bob", tier=Tier.SILVER, since=customer.since)
    done = await typed_graph.ainvoke(Command(resume=answer), cfg("typed"))
    assert done["decision"] == answer and isinstance(done["decision"], Customer)
    assert done["log"] == ["Ada gold Bob"]
    # a caller that attaches later gets the same objects, rebuilt from the checkpoint
    later = await durable(build_typed().compile(), graph_ref="test_threads:typed_graph").ainvoke(
        None, cfg("typed", perdure_turn=1)
    )
    assert later["decision"] == answer and isinstance(later["order"], Order)


async def test_a_value_that_cannot_be_checkpointed_fails_when_written(env: str) -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    with pytest.raises(ConfigurationError, match="Local"):
        await typed_graph.ainvoke({"customer": Local(1)}, cfg("typed-bad"))
    with pytest.raises(DisallowedTypeError):
        typed_graph.checkpointer.serde.dumps_typed(Local(2))


async def test_new_input_while_a_turn_waits_is_refused(env: str) -> None:
    customer = round_trip_values()["customer"]
    out = await typed_graph.ainvoke({"customer": customer}, cfg("busy"))
    assert out["__interrupt__"]
    other = customer.model_copy(update={"name": "Eve"})
    with pytest.raises(InvalidRunStateError, match=r"busy#1.*Command\(resume"):
        await typed_graph.ainvoke({"customer": other}, cfg("busy"), durability="exit")
    # the same input again is the same turn: it attaches and shows the pending interrupt
    again = await typed_graph.ainvoke({"customer": customer}, cfg("busy"))
    assert [i.id for i in again["__interrupt__"]] == [i.id for i in out["__interrupt__"]]


# -- breakpoints ------------------------------------------------------------------------------


async def test_interrupt_before_is_a_durable_approval(env: str, receiver: Receiver) -> None:
    out = await gated_chat.ainvoke({"messages": [HumanMessage("hi")]}, cfg("gate"))
    assert said(out) == ["HumanMessage:hi", "AIMessage:heard hi"]
    info = await perdure.get_run("gate#1")
    assert info.status is RunStatus.SUSPENDED and info.waiting_for == "approval"
    assert info.attention is not None and info.attention["next"] == ["notify"]
    assert receiver.requests["notify-gate-hi"] == 0
    await perdure.approve("gate#1", by="alice")
    done = await gated_chat.ainvoke(None, cfg("gate"))  # attaches and drives it on
    assert said(done)[-1] == "AIMessage:noted notify-gate-hi-1"
    history = await perdure.history("gate#1")
    [received] = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    assert received.data["sent_by"] == "alice"

    # turn 2 stops at the breakpoint again; invoke(None) continues past it, as in LangGraph
    out = await gated_chat.ainvoke({"messages": [HumanMessage("again")]}, cfg("gate"))
    assert (await perdure.get_run("gate#2")).status is RunStatus.SUSPENDED
    done = await gated_chat.ainvoke(None, cfg("gate"))
    assert said(done)[-1] == "AIMessage:noted notify-gate-again-1"

    # a call-time breakpoint, rejected: the turn ends before the node runs
    out = await sc.chat_graph.ainvoke(
        {"messages": [HumanMessage("x")]}, cfg("gate-call"), interrupt_before=["notify"]
    )
    await perdure.reject("gate-call#1", by="bob")
    info = await (await perdure.connect()).wait("gate-call#1")
    assert info.status is RunStatus.SUCCEEDED
    assert receiver.requests["notify-gate-call-x"] == 0
    state = await sc.chat_graph.aget_state(cfg("gate-call"))
    assert state.next == ("notify",)


# -- the rest of the API ----------------------------------------------------------------------


async def test_update_state_time_travel_context_and_stream_mode(env: str) -> None:
    first = await count_graph.ainvoke({"n": 0, "log": []}, cfg("count"), context=Tenant("acme"))
    assert first == {"n": 1, "log": ["acme:0"]}
    # a human edits the state, then the thread continues: a new turn
    await count_graph.aupdate_state(cfg("count"), {"n": 10}, as_node="__start__")
    edited = await count_graph.ainvoke(None, cfg("count"), context=Tenant("acme"))
    assert edited == {"n": 11, "log": ["acme:0", "acme:10"]}
    assert (await perdure.get_run("count#2")).status is RunStatus.SUCCEEDED
    # time travel: from the checkpoint before the first count, a fork is turn 3
    history = list(count_graph.get_state_history(cfg("count")))
    [before] = [h for h in history if h.next == ("count",) and h.values.get("n") == 0]
    forked = await count_graph.ainvoke(None, before.config, context=Tenant("fork"))
    assert forked == {"n": 1, "log": ["fork:0"]}
    assert (await perdure.get_run("count#3")).status is RunStatus.SUCCEEDED
    # stream_mode on invoke returns what LangGraph returns for it
    chunks = await count_graph.ainvoke(
        {"n": 5}, cfg("count"), stream_mode="updates", durability="async"
    )
    assert chunks == [{"count": {"n": 6, "log": ["fork:0", "-:5"]}}]


async def test_a_factory_built_graph_and_sync_invoke_in_a_running_loop(env: str) -> None:
    assert factory_graph.locator() == "test_threads:make_count_graph"
    out = factory_graph.invoke({"n": 1, "log": []}, cfg("factory"))
    assert out == {"n": 2, "log": ["-:1"]}
    assert turn_run_id("factory", 1) == "factory#1"
    assert (await perdure.get_run("factory#1")).status is RunStatus.SUCCEEDED


async def test_a_node_renamed_inside_a_subgraph_is_a_determinism_error(env: str) -> None:
    out = await nested_graph.ainvoke({"n": 0, "log": []}, cfg("nested-renamed"))
    assert [i.value for i in out["__interrupt__"]] == ["go?"]
    with pytest.raises(perdure.DeterminismError, match="ask"):
        await renamed_nested.ainvoke(Command(resume="yes"), cfg("nested-renamed"))
    info = await perdure.get_run("nested-renamed#1")
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None and info.attention["step_key"] == "node:ask"
    # the graph unchanged resumes the same kind of thread
    await nested_graph.ainvoke({"n": 0, "log": []}, cfg("nested-same"))
    done = await nested_graph.ainvoke(Command(resume="yes"), cfg("nested-same"))
    assert done["log"] == ["ok yes"]
