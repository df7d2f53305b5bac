"""What the adapter-retention tests prune: LangGraph threads (one that finishes, one that
waits at an interrupt) and perdure runs that write an Agents SDK ``PerdureSession``."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import perdure
from perdure_openai_agents import PerdureSession


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _greet(state: State) -> State:
    return {"log": ["hello"]}


def _ask(state: State) -> State:
    answer = interrupt({"question": "go on?"})
    return {"log": [f"answer {answer}"]}


def greeting_graph() -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("greet", _greet)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", END)
    return builder


def asking_graph() -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("greet", _greet)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", "ask")
    builder.add_edge("ask", END)
    return builder


def greeting() -> Any:
    """The compiled greeting graph (what ``graph_ref`` names for a worker)."""
    return greeting_graph().compile()


def asking() -> Any:
    return asking_graph().compile()


@perdure.workflow
async def chat(session_id: str, text: str, wait: bool) -> str:
    """Writes one item to the session, then (``wait``) waits for a signal."""
    session = PerdureSession(session_id)
    await session.add_items([{"role": "user", "content": text}])
    if wait:
        await perdure.wait_for_signal("more")
    return text
