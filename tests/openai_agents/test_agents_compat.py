"""The SDK private names the adapter relies on (all in ``perdure_openai_agents._compat``)
are where it expects them. An SDK upgrade that moves one fails here, by name, instead of
making durable runs silently stop recording model or tool calls."""

from __future__ import annotations

import dataclasses
import inspect

from agents import Agent, FunctionTool, RunResultStreaming, function_tool, handoff
from agents import tool as sdk_tool
from agents.run_internal import run_loop, tool_execution

from perdure_openai_agents import _compat
from perdure_openai_agents._wrap import install_hooks


def test_the_run_loop_resolves_models_through_get_model() -> None:
    assert list(inspect.signature(_compat._SDK_GET_MODEL).parameters) == ["agent", "run_config"]
    source = inspect.getsource(run_loop)
    assert source.count("get_model(execution_agent, run_config)") >= 2, (
        "the run loop no longer resolves models with get_model(agent, run_config): "
        "model calls would not be recorded"
    )


def test_the_run_loop_invokes_function_tools_through_one_function() -> None:
    params = inspect.signature(_compat._SDK_INVOKE_TOOL).parameters
    assert list(params) == ["function_tool", "context", "arguments"]
    assert "_invoke_function_tool_with_metadata(" in inspect.getsource(tool_execution)
    fields = [f.name for f in dataclasses.fields(sdk_tool._FunctionToolInvocationResult)]
    assert fields == ["output", "is_sdk_generated_error"]


def test_the_hooks_replace_the_sdk_functions() -> None:
    install_hooks()
    assert run_loop.get_model is _compat._get_model
    assert tool_execution._invoke_function_tool_with_metadata is _compat._invoke_tool
    install_hooks()  # idempotent
    assert run_loop.get_model is _compat._get_model


def test_agent_tools_are_marked() -> None:
    assert "_is_agent_tool" in {f.name for f in dataclasses.fields(FunctionTool)}


def test_a_streaming_result_is_built_with_the_fields_run_streamed_uses() -> None:
    names = {f.name for f in dataclasses.fields(RunResultStreaming)}
    assert "_current_agent_output_schema" in names
    assert {"run_loop_task", "current_agent", "current_turn", "is_complete"} <= names


def test_an_agent_tool_names_its_agent_and_a_plain_tool_none() -> None:
    inner = Agent(name="inner")
    as_tool = inner.as_tool(tool_name="ask_inner", tool_description="ask")
    assert _compat.is_agent_tool(as_tool)
    assert _compat.agent_of_tool(as_tool) is inner

    @function_tool
    def plain() -> str:
        return "x"

    assert not _compat.is_agent_tool(plain)
    assert _compat.agent_of_tool(plain) is None


def test_a_handoff_names_its_target_agent() -> None:
    target = Agent(name="target")
    assert _compat.handoff_target(handoff(target)) is target
    assert _compat.handoff_target(object()) is None
