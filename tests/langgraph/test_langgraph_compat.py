"""The private LangGraph names perdure_langgraph._compat uses are still where it expects
them, with the shape it relies on: this fails loudly on a LangGraph upgrade that moves one."""

from __future__ import annotations

import inspect

from langgraph.checkpoint.serde import jsonplus
from langgraph.pregel import _runner

from perdure_langgraph import _compat


def test_the_task_runner_hook_is_installed_on_langgraphs_runner() -> None:
    runner = _runner.arun_with_retry
    assert getattr(runner, "__perdure__", False), "durable() could not wrap arun_with_retry"
    from langgraph.pregel import _retry

    # the wrapper replaces the task's runnable: the first argument must be the task
    params = list(inspect.signature(_retry.arun_with_retry).parameters)
    assert params[0] == "task", params
    assert _runner.arun_with_retry is not _retry.arun_with_retry


def test_safe_types_and_schema_allowlist_are_where_we_read_them() -> None:
    assert ("langchain_core.messages.human", "HumanMessage") in _compat.SAFE_TYPES
    assert ("langgraph.types", "Command") in _compat.SAFE_TYPES
    assert ("datetime", "datetime", "fromisoformat") in _compat.SAFE_METHODS
    from typed_state import TypesGraphState

    declared = _compat.declared_types(TypesGraphState)
    assert ("typed_state", "Customer") in declared and ("typed_state", "Tier") in declared


def test_msgpack_extension_codes_are_the_ones_we_decode() -> None:
    assert (
        jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG,
        jsonplus.EXT_CONSTRUCTOR_POS_ARGS,
        jsonplus.EXT_CONSTRUCTOR_KW_ARGS,
        jsonplus.EXT_METHOD_SINGLE_ARG,
        jsonplus.EXT_PYDANTIC_V1,
        jsonplus.EXT_PYDANTIC_V2,
        jsonplus.EXT_NUMPY_ARRAY,
    ) == (0, 1, 2, 3, 4, 5, 6)
    assert callable(_compat.numpy_ext_hook)
