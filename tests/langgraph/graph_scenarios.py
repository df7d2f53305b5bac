"""Durable LangGraph graphs the adapter tests run, in worker processes and in the test process.

Every side effect is a POST to the test's receiver (``PERDURE_TEST_RECEIVER``), so counts
are taken outside the worker. Endpoint names carry the order id, so one process can hold
several threads at different points. ``GRAPH_VARIANT=v2`` renames ``review_graph``'s node
``review`` to ``review_v2`` under its in-flight threads.

``python -m graph_scenarios many GRAPH:THREAD:ORDER ...`` starts the threads and drives
them until each ends or waits at an interrupt (or the test kills the process).
``python -m graph_scenarios chat THREAD TEXT ...`` sends each text as one turn of the chat
thread ``THREAD``, one after the other (``TEXT!`` stops that turn before ``notify``).
"""

from __future__ import annotations

import asyncio
import operator
import os
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.types import Send, interrupt

import perdure
from perdure.testing import post
from perdure_langgraph.durable import DurableGraph, durable


def _url(path: str) -> str:
    return f"{os.environ['PERDURE_TEST_RECEIVER']}/{path}"


async def _post(path: str, body: Any, key: str | None = None) -> Any:
    return await asyncio.to_thread(post, _url(path), body, key=key)


class State(TypedDict, total=False):
    order: str
    log: Annotated[list[str], operator.add]
    approved: bool


# -- effects -----------------------------------------------------------------------------------


@perdure.effect(idempotent_receiver=True)
async def charge(order: str) -> str:
    """The payment service dedupes on the idempotency key."""
    answer = await _post(f"dedup/charge-{order}", {"order": order}, key=perdure.idempotency_key())
    return str(answer["id"])


@perdure.effect()
async def email(order: str) -> str:
    """The mail relay cannot dedupe."""
    answer = await _post(f"plain/email-{order}", {"order": order})
    return str(answer["id"])


@perdure.step
async def prepare(order: str) -> str:
    """Recorded work done before an interrupt: never repeated when the node re-runs."""
    answer = await _post(f"plain/prepare-{order}", {"order": order})
    return str(answer["id"])


# -- nodes --------------------------------------------------------------------------------------


async def lookup(state: State) -> dict[str, Any]:
    """Not recorded: counted once only when the graph resumes from a later checkpoint."""
    await _post(f"plain/lookup-{state['order']}", {"order": state["order"]})
    return {"log": [f"lookup {state['order']}"]}


async def charge_node(state: State) -> dict[str, Any]:
    return {"log": [f"charge {await charge(state['order'])}"]}


async def email_node(state: State) -> dict[str, Any]:
    return {"log": [f"email {await email(state['order'])}"]}


async def review(state: State) -> dict[str, Any]:
    prepared = await prepare(state["order"])
    decision = interrupt({"tool": "refund", "arguments": {"order": state["order"], "cents": 4200}})
    approved = bool(decision.get("approved")) if isinstance(decision, dict) else bool(decision)
    return {"approved": approved, "log": [f"review {prepared} {approved}"]}


def after_review(state: State) -> str:
    return "charge" if state.get("approved") else END


async def para_a(state: State) -> dict[str, Any]:
    answer = await _effect_a(state["order"])
    return {"log": [f"a {answer}"]}


async def para_b(state: State) -> dict[str, Any]:
    answer = await _effect_b(state["order"])
    return {"log": [f"b {answer}"]}


@perdure.effect(idempotent_receiver=True, name="para_a")
async def _effect_a(order: str) -> str:
    answer = await _post(f"dedup/para_a-{order}", {"order": order}, key=perdure.idempotency_key())
    return str(answer["id"])


@perdure.effect(idempotent_receiver=True, name="para_b")
async def _effect_b(order: str) -> str:
    answer = await _post(f"dedup/para_b-{order}", {"order": order}, key=perdure.idempotency_key())
    return str(answer["id"])


async def join(state: State) -> dict[str, Any]:
    await _post(f"plain/join-{state['order']}", {"order": state["order"]})
    return {"log": ["join"]}


# -- graphs -------------------------------------------------------------------------------------


def build_refund() -> StateGraph:
    """lookup -> charge -> email."""
    builder = StateGraph(State)
    builder.add_node("lookup", lookup)
    builder.add_node("charge", charge_node)
    builder.add_node("email", email_node)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "charge")
    builder.add_edge("charge", "email")
    builder.add_edge("email", END)
    return builder


def build_review(variant: str | None = None) -> StateGraph:
    """lookup -> review (interrupt) -> charge -> email; v2 renames ``review``."""
    name = "review_v2" if (variant or os.environ.get("GRAPH_VARIANT")) == "v2" else "review"
    builder = StateGraph(State)
    builder.add_node("lookup", lookup)
    builder.add_node(name, review)
    builder.add_node("charge", charge_node)
    builder.add_node("email", email_node)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", name)
    builder.add_conditional_edges(name, after_review, ["charge", END])
    builder.add_edge("charge", "email")
    builder.add_edge("email", END)
    return builder


def build_parallel() -> StateGraph:
    """START -> (para_a | para_b) -> join."""
    builder = StateGraph(State)
    builder.add_node("para_a", para_a)
    builder.add_node("para_b", para_b)
    builder.add_node("join", join)
    builder.add_edge(START, "para_a")
    builder.add_edge(START, "para_b")
    builder.add_edge(["para_a", "para_b"], "join")
    builder.add_edge("join", END)
    return builder


class FanState(TypedDict, total=False):
    orders: list[str]
    log: Annotated[list[str], operator.add]


async def charge_one(arg: dict[str, str]) -> dict[str, Any]:
    return {"log": [f"charge {await charge(arg['order'])}"]}


def fan_out(state: FanState) -> list[Send]:
    return [Send("charge_one", {"order": o}) for o in state["orders"]]


def build_send() -> StateGraph:
    """One ``charge_one`` task per order, by ``Send``."""
    builder = StateGraph(FanState)
    builder.add_node("charge_one", charge_one)
    builder.add_conditional_edges(START, fan_out, ["charge_one"])
    builder.add_edge("charge_one", END)
    return builder


def build_nested() -> StateGraph:
    """lookup -> refund (the refund graph as a subgraph node) -> done."""
    inner = build_refund().compile()

    async def done(state: State) -> dict[str, Any]:
        return {"log": ["done"]}

    builder = StateGraph(State)
    builder.add_node("refund", inner)
    builder.add_node("done", done)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", "done")
    builder.add_edge("done", END)
    return builder


async def ask_a(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "a", "signal": "resume"})
    return {"log": [f"a={answer}"]}


async def ask_b(state: State) -> dict[str, Any]:
    await prepare(state["order"])
    answer = interrupt({"question": "b", "signal": "resume"})
    return {"log": [f"b={answer}"]}


async def ask_twice(state: State) -> dict[str, Any]:
    first = interrupt({"question": "first"})
    charged = await charge(state["order"])
    second = interrupt({"question": "second"})
    return {"log": [f"{first} {charged} {second}"]}


def build_questions() -> StateGraph:
    """(ask_a | ask_b), two interrupts pending at once, answered on signal ``resume``;
    then ``ask_twice``, two interrupts one after the other in one node."""
    builder = StateGraph(State)
    builder.add_node("ask_a", ask_a)
    builder.add_node("ask_b", ask_b)
    builder.add_node("ask_twice", ask_twice)
    builder.add_edge(START, "ask_a")
    builder.add_edge(START, "ask_b")
    builder.add_edge(["ask_a", "ask_b"], "ask_twice")
    builder.add_edge("ask_twice", END)
    return builder


def build_twice() -> StateGraph:
    """``ask_twice`` alone: interrupt, charge, interrupt again, in one node."""
    builder = StateGraph(State)
    builder.add_node("ask_twice", ask_twice)
    builder.add_edge(START, "ask_twice")
    builder.add_edge("ask_twice", END)
    return builder


@task
async def charge_task(order: str) -> str:
    return await charge(order)


@task
async def email_task(order: str) -> str:
    return await email(order)


@entrypoint()
async def refund_workflow(order: str) -> dict[str, Any]:
    """The refund flow in LangGraph's Functional API."""
    charged = await charge_task(order)
    mailed = await email_task(order)
    return {"order": order, "charge": charged, "email": mailed}


# -- a chat: one turn per user message on one thread ---------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@perdure.effect(idempotent_receiver=True)
async def notify(thread: str, text: str) -> str:
    """Tell the CRM about the user's message (the CRM dedupes on the key)."""
    answer = await _post(
        f"dedup/notify-{thread}-{text}", {"text": text}, key=perdure.idempotency_key()
    )
    return str(answer["id"])


def agent(state: ChatState) -> dict[str, Any]:
    """A scripted model: it answers from the whole history it sees."""
    said = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    assert all(isinstance(m, AIMessage | HumanMessage) for m in state["messages"])
    return {"messages": [AIMessage(f"heard {' / '.join(map(str, said))}")]}


async def notify_node(state: ChatState, config: RunnableConfig) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage), last
    human = [m for m in state["messages"] if isinstance(m, HumanMessage)][-1]
    thread = config["configurable"]["thread_id"]
    receipt = await notify(thread, str(human.content))
    return {"messages": [AIMessage(f"noted {receipt}")]}


def build_chat() -> StateGraph:
    """agent -> notify: each turn answers, then records the message at the CRM."""
    builder = StateGraph(ChatState)
    builder.add_node("agent", agent)
    builder.add_node("notify", notify_node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "notify")
    builder.add_edge("notify", END)
    return builder


#: A plain compiled graph: ``durable(plain_refund)`` finds it by its module attribute.
plain_refund = build_refund().compile()
refund_graph: DurableGraph = durable(build_refund().compile())
review_graph: DurableGraph = durable(build_review().compile())
parallel_graph: DurableGraph = durable(build_parallel().compile())
send_graph: DurableGraph = durable(build_send().compile())
nested_graph: DurableGraph = durable(build_nested().compile())
functional_graph: DurableGraph = durable(refund_workflow)
questions_graph: DurableGraph = durable(build_questions().compile())
twice_graph: DurableGraph = durable(build_twice().compile())
chat_graph: DurableGraph = durable(build_chat().compile())

GRAPHS: dict[str, DurableGraph] = {
    "refund": refund_graph,
    "review": review_graph,
    "parallel": parallel_graph,
    "send": send_graph,
    "nested": nested_graph,
    "functional": functional_graph,
    "questions": questions_graph,
    "twice": twice_graph,
    "chat": chat_graph,
}


def graph_input(graph: str, order: str) -> Any:
    """The input each graph starts from."""
    if graph == "functional":
        return order
    if graph == "send":
        return {"orders": [f"{order}1", f"{order}2"], "log": []}
    return {"order": order, "log": []}


async def many(specs: list[str]) -> None:
    """Start every ``GRAPH:THREAD:ORDER`` thread and drive them until each stops."""
    try:
        await asyncio.gather(
            *(
                GRAPHS[name].ainvoke(
                    graph_input(name, order), {"configurable": {"thread_id": thread}}
                )
                for name, thread, order in (spec.split(":") for spec in specs)
            )
        )
    finally:
        await perdure.shutdown()


async def chat(thread: str, texts: list[str]) -> None:
    """Send each text as one turn; ``TEXT!`` stops before ``notify`` for an approval."""
    try:
        for text in texts:
            gated = text.endswith("!")
            await chat_graph.ainvoke(
                {"messages": [HumanMessage(text.rstrip("!"))]},
                {"configurable": {"thread_id": thread}},
                **({"interrupt_before": ["notify"]} if gated else {}),
            )
    finally:
        await perdure.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "many":
        asyncio.run(many(sys.argv[2:]))
    elif sys.argv[1] == "chat":
        asyncio.run(chat(sys.argv[2], sys.argv[3:]))
    else:
        raise SystemExit("usage: python -m graph_scenarios many|chat ...")
