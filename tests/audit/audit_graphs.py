"""Graphs for ``perdure audit``: a ToolNode with a declared and an undeclared tool, a
subgraph, and a node calling a declared effect."""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode

import perdure


class State(TypedDict, total=False):
    messages: list[Any]
    note: str


@tool
def drop_table(name: str) -> str:
    """Drop a table (undeclared)."""
    return name


@tool
@perdure.effect(idempotent_receiver=True)
async def post_invoice(order_id: str) -> str:
    """Post an invoice to a receiver that dedupes."""
    return order_id


@perdure.effect()
def page_oncall(text: str) -> str:
    return text


async def escalate(state: State) -> dict[str, Any]:
    await page_oncall(state.get("note", ""))
    return {}


def summarize(state: State) -> dict[str, Any]:
    return {"note": "done"}


def _inner() -> Any:
    builder = StateGraph(State)
    builder.add_node("summarize", summarize)
    builder.add_edge(START, "summarize")
    builder.add_edge("summarize", END)
    return builder.compile(name="summary")


def _outer() -> Any:
    builder = StateGraph(State)
    builder.add_node("tools", ToolNode([drop_table, post_invoice]))
    builder.add_node("escalate", escalate)
    builder.add_node("report", _inner())
    builder.add_edge(START, "tools")
    builder.add_edge("tools", "escalate")
    builder.add_edge("escalate", "report")
    builder.add_edge("report", END)
    return builder.compile(name="ops")


ops_graph = _outer()
