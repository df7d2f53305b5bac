"""A real StateGraph on PerdureSaver (SQLite file) resumes from its last checkpoint in a
new saver instance, and its history can be read back."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import StateSnapshot

from perdure_langgraph import PerdureSaver


class State(TypedDict):
    n: int
    log: Annotated[list[str], operator.add]


class Crash(RuntimeError):
    """Stands in for a process dying inside a node."""


def build(calls: dict[str, int], crash_in_b: bool) -> StateGraph:
    """Two nodes and a conditional edge: a -> (b | END), b -> a."""

    def a(state: State) -> dict[str, object]:
        calls["a"] += 1
        return {"n": state["n"] + 1, "log": ["a"]}

    def b(state: State) -> dict[str, object]:
        calls["b"] += 1
        if crash_in_b:
            raise Crash("died in b")
        return {"log": ["b"]}

    def route(state: State) -> str:
        return "b" if state["n"] % 2 == 1 else END

    builder = StateGraph(State)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_conditional_edges("a", route, ["b", END])
    builder.add_edge("b", "a")
    return builder


def _summary(snapshot: StateSnapshot) -> tuple[object, ...]:
    step = snapshot.metadata["step"] if snapshot.metadata else None
    return (snapshot.values, snapshot.next, step)


def test_resume_in_new_saver_and_history(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    config = {"configurable": {"thread_id": "refund-42"}}
    calls = {"a": 0, "b": 0}

    first = PerdureSaver.from_url(url)
    graph = build(calls, crash_in_b=True).compile(checkpointer=first)
    with pytest.raises(Crash):
        graph.invoke({"n": 0, "log": []}, config, durability="sync")
    first.close()
    assert calls == {"a": 1, "b": 1}

    with PerdureSaver.from_url(url) as second:
        graph = build(calls, crash_in_b=False).compile(checkpointer=second)
        before = graph.get_state(config)
        assert before.values == {"n": 1, "log": ["a"]}
        assert before.next == ("b",)

        result = graph.invoke(None, config, durability="sync")
        assert result == {"n": 2, "log": ["a", "b", "a"]}
        # "a" ran once before the crash and once after b, never again for step 1
        assert calls == {"a": 2, "b": 2}

        history = list(graph.get_state_history(config))
        assert history[0].values == result
        assert history[0].next == ()
        steps = [h.metadata["step"] for h in history if h.metadata]
        assert steps == sorted(steps, reverse=True)
        assert steps[-1] == -1  # the input checkpoint
        assert [h.values.get("log") for h in reversed(history)] == [
            [],  # before the input was applied
            [],
            ["a"],
            ["a", "b"],
            ["a", "b", "a"],
        ]
        # the same history as LangGraph's reference saver after the same crash and resume
        reference = InMemorySaver()
        ref_calls = {"a": 0, "b": 0}
        with pytest.raises(Crash):
            build(ref_calls, crash_in_b=True).compile(checkpointer=reference).invoke(
                {"n": 0, "log": []}, config, durability="sync"
            )
        ref_graph = build(ref_calls, crash_in_b=False).compile(checkpointer=reference)
        ref_graph.invoke(None, config, durability="sync")
        ref_history = list(ref_graph.get_state_history(config))
        assert [
            (h.values, h.next, h.metadata["step"] if h.metadata else None) for h in history
        ] == [(h.values, h.next, h.metadata["step"] if h.metadata else None) for h in ref_history]
        parents = [h.parent_config for h in history]
        assert parents[-1] is None and all(p is not None for p in parents[:-1])
