"""Every private name of LangGraph this package uses, in one place.

LangGraph offers no public hook for these, so they are gathered here and checked by
``tests/langgraph/test_langgraph_compat.py``, which fails loudly when an upgrade moves one:

* ``langgraph.pregel._runner.arun_with_retry``: the one function every async task
  (node, ``Send`` target, subgraph node, functional ``@task``) runs through. ``durable()``
  wraps it once so a task of a durable drive runs inside ``perdure.keyed(...)``; tasks of
  other graphs pass through untouched.
* ``langgraph.checkpoint.serde._msgpack.SAFE_MSGPACK_TYPES`` / ``SAFE_MSGPACK_METHODS``:
  the types LangGraph's strict mode decodes without being told.
* ``langgraph._internal._serde.build_serde_allowlist``: the types a graph's schemas declare
  (what ``compile()`` allows under ``LANGGRAPH_STRICT_MSGPACK=true``).
* ``langgraph.checkpoint.serde.types._DeltaSnapshot``: DeltaChannel snapshots in checkpoints.
* ``langgraph.checkpoint.serde.jsonplus._msgpack_ext_hook``: decodes numpy arrays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde import jsonplus as lg_jsonplus
from langgraph.pregel import _runner as lg_runner

try:  # LangGraph >= 1.2: snapshots of DeltaChannel state
    from langgraph.checkpoint.serde.types import _DeltaSnapshot as DeltaSnapshot
except ImportError:  # pragma: no cover - older langgraph-checkpoint
    DeltaSnapshot = None  # type: ignore[assignment,misc]

__all__ = [
    "SAFE_METHODS",
    "SAFE_TYPES",
    "DeltaSnapshot",
    "declared_types",
    "install_task_wrapper",
    "numpy_ext_hook",
    "schema_types",
]

SAFE_TYPES: frozenset[tuple[str, ...]] = lg_msgpack.SAFE_MSGPACK_TYPES
SAFE_METHODS: frozenset[tuple[str, str, str]] = lg_msgpack.SAFE_MSGPACK_METHODS
numpy_ext_hook: Callable[[int, bytes], Any] = lg_jsonplus._msgpack_ext_hook  # pyright: ignore[reportPrivateUsage]


def install_task_wrapper(wrap: Callable[[Any, Any], Any | None]) -> None:
    """Run ``wrap(task, proc)`` before every async task; a non-``None`` result replaces
    the task's runnable for that run. Installed once per process."""
    original = lg_runner.arun_with_retry
    if getattr(original, "__perdure__", False):
        return

    async def arun_with_retry(task: Any, *args: Any, **kwargs: Any) -> Any:
        proc = wrap(task, task.proc)
        if proc is not None:
            task = dataclasses.replace(task, proc=proc)
        return await original(task, *args, **kwargs)

    arun_with_retry.__perdure__ = True  # type: ignore[attr-defined]
    lg_runner.arun_with_retry = arun_with_retry  # type: ignore[assignment]


def declared_types(*schemas: Any) -> set[tuple[str, ...]]:
    """(module, name) of the classes these schemas (TypedDicts, pydantic models,
    dataclasses, type hints) declare, recursively."""
    from langgraph._internal._serde import build_serde_allowlist

    return build_serde_allowlist(schemas=list(schemas))


def schema_types(graph: Any) -> set[tuple[str, ...]]:
    """(module, name) of every class the graph's schemas and channels declare, its
    subgraphs' too (what LangGraph's strict mode allows for that graph)."""
    from langgraph._internal._serde import build_serde_allowlist

    found: set[tuple[str, ...]] = set()
    graphs = [graph]
    try:
        graphs += [sub for _, sub in graph.get_subgraphs(recurse=True)]
    except Exception:  # a graph whose subgraphs cannot be listed still has its own schema
        pass
    for g in graphs:
        schemas: list[Any] = []
        builder = getattr(g, "builder", None)
        if builder is not None:
            for attr in ("state_schema", "input_schema", "output_schema", "context_schema"):
                schemas.append(getattr(builder, attr, None))
            for node in (getattr(builder, "nodes", None) or {}).values():
                schemas.append(getattr(node, "input_schema", None))
        found |= build_serde_allowlist(
            schemas=[s for s in schemas if s is not None], channels=getattr(g, "channels", None)
        )
    return found
