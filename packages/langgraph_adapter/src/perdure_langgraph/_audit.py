"""``perdure audit`` for LangGraph: a compiled graph's nodes, ``ToolNode`` tools,
subgraphs and the ``@task``s its nodes call, with the perdure policy each carries.

A node is checkpointed once it completes, but runs again whole if a crash interrupts
it; perdure steps and effects it calls are recorded (and listed as its calls).
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.pregel import Pregel

from perdure.spi import Audit, AuditEntry, calls_of, declaration_of, policy_of, source_of
from perdure_langgraph.durable import DurableGraph

_RERUN = "LangGraph runs it again if a crash interrupts it"


def inspect_object(obj: Any, audit: Audit) -> bool:
    """Report ``obj`` if it is a compiled (or ``durable()``) LangGraph graph."""
    graph = obj.compiled if isinstance(obj, DurableGraph) else obj
    if not isinstance(graph, Pregel):
        return False
    if graph is not obj:
        audit.visit(graph)  # the same graph may also be reached undecorated
        return True
    owner = f"graph {graph.name}"
    for name, node in graph.nodes.items():
        if name.startswith("__"):
            continue
        _node(name, node.bound, owner, audit)
    return True


def _node(name: str, bound: Any, owner: str, audit: Audit) -> None:
    if isinstance(bound, Pregel):
        audit.add(AuditEntry(owner, "subgraph", name, "container", note=f"graph {bound.name}"))
        audit.visit(bound)
        return
    if isinstance(bound, ToolNode):
        audit.add(AuditEntry(owner, "tool-node", name, "container", note="its tools are listed"))
        for tool in bound.tools_by_name.values():
            _tool(tool, owner, audit)
        return
    fn = getattr(bound, "afunc", None) or getattr(bound, "func", None)
    _function("node", name, fn, owner, audit)
    for task_name, task in _tasks(fn):
        _function("task", task_name, task.func, owner, audit)


def _function(kind: str, name: str, fn: Any, owner: str, audit: Audit) -> None:
    spec = None if fn is None else declaration_of(fn)
    defined, location = (None, None) if fn is None else source_of(fn)
    calls = () if fn is None or spec is not None else calls_of(fn)
    if spec is not None:
        policy = policy_of(spec)
    else:
        policy = "delegates" if calls else "undeclared"
    audit.add(
        AuditEntry(
            owner,
            kind,
            name,
            policy,
            defined_in=defined,
            location=location,
            declared_by=None if spec is None else f"@perdure.{spec.kind}",
            calls=calls,
            note=_RERUN if spec is None and not calls else "",
        )
    )


def _tool(tool: BaseTool, owner: str, audit: Audit) -> None:
    fn = getattr(tool, "coroutine", None) or getattr(tool, "func", None)
    spec = None if fn is None else declaration_of(fn)
    defined, location = (None, None) if fn is None else source_of(fn)
    audit.add(
        AuditEntry(
            owner,
            "tool",
            tool.name,
            "undeclared" if spec is None else policy_of(spec),
            defined_in=defined,
            location=location,
            declared_by=None if spec is None else f"@perdure.{spec.kind}",
            note="ToolNode calls it again if a crash interrupts the node" if spec is None else "",
        )
    )


def _tasks(fn: Any) -> list[tuple[str, Any]]:
    """The ``@task`` functions ``fn`` refers to by a global name (duck-typed: a task is
    an object with the wrapped ``func`` and its ``retry_policy``)."""
    code = getattr(fn, "__code__", None)
    scope = getattr(fn, "__globals__", None)
    if code is None or not isinstance(scope, dict):
        return []
    found: list[tuple[str, Any]] = []
    for name in code.co_names:
        value = scope.get(name)
        if callable(getattr(value, "func", None)) and hasattr(value, "retry_policy"):
            found.append((name, value))
    return found
