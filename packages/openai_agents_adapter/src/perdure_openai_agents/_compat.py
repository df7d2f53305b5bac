"""Every private name of the Agents SDK this adapter uses, and nothing else.

The SDK has no public hook for "every model call" or "every function-tool call" of a run
that leaves the user's agents and tools untouched (the public ways — ``Agent.clone``,
new tool lists — give the run copies, so ``result.last_agent is agent`` and the agent a
tool sees would no longer be the user's). So the adapter wraps the two functions the
run loop calls for them, and the wrappers do nothing unless a durable run is being
driven in the current context (``active()``). ``tests/openai_agents/test_agents_compat.py``
fails loudly when an SDK upgrade moves any of these.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunResultStreaming
from agents import tool as sdk_tool
from agents.models.interface import Model
from agents.run_config import RunConfig
from agents.run_internal import run_loop, tool_execution
from agents.tool_context import ToolContext

#: (agent, run_config) -> Model: the run loop's model resolution.
ModelHook = Callable[[Model], Model]
#: What the run loop awaits for one function-tool call.
ToolInvoker = Callable[..., Awaitable[Any]]
ToolHook = Callable[[ToolInvoker, FunctionTool, ToolContext[Any], str], Awaitable[Any]]

_SDK_GET_MODEL: Callable[[Any, RunConfig], Model] = run_loop.get_model
_INVOKE = "_invoke_function_tool_with_metadata"
_SDK_INVOKE_TOOL: ToolInvoker = getattr(tool_execution, _INVOKE)
#: The SDK's record of one tool invocation (output, is_sdk_generated_error).
ToolInvocation: type[Any] = sdk_tool._FunctionToolInvocationResult  # pyright: ignore[reportPrivateUsage]

_hooks: dict[str, Any] = {}


def install(model_hook: ModelHook, tool_hook: ToolHook) -> None:
    """Route the run loop's model resolution and function-tool calls through the hooks
    (idempotent). The hooks decide themselves whether a durable run is active."""
    _hooks["model"] = model_hook
    _hooks["tool"] = tool_hook
    if run_loop.get_model is not _get_model:
        run_loop.get_model = _get_model
    if getattr(tool_execution, _INVOKE) is not _invoke_tool:
        setattr(tool_execution, _INVOKE, _invoke_tool)


def _get_model(agent: Any, run_config: RunConfig) -> Model:
    return _hooks["model"](_SDK_GET_MODEL(agent, run_config))


async def _invoke_tool(
    *, function_tool: FunctionTool, context: ToolContext[Any], arguments: str
) -> Any:
    return await _hooks["tool"](_SDK_INVOKE_TOOL, function_tool, context, arguments)


def validate_run_arguments(
    hooks: Any,
    session: Any,
    *,
    input: Any,
    conversation_id: str | None,
    previous_response_id: str | None,
    auto_previous_response_id: bool,
) -> None:
    """The SDK's own checks of ``run``/``run_streamed`` arguments, made before a durable
    run is created (``run_streamed`` raises them at the call, as the SDK's does). A
    resumed ``RunState`` brings its own conversation settings, as in the SDK (which
    applies them to the state the same way when the run starts)."""
    from agents.run_internal.agent_runner_helpers import (
        apply_resumed_conversation_settings,
        validate_session_conversation_settings,
    )
    from agents.run_internal.turn_preparation import validate_run_hooks
    from agents.run_state import RunState

    validate_run_hooks(hooks)
    if isinstance(input, RunState):
        conversation_id, previous_response_id, auto_previous_response_id = (
            apply_resumed_conversation_settings(
                run_state=input,  # pyright: ignore[reportUnknownArgumentType]
                conversation_id=conversation_id,
                previous_response_id=previous_response_id,
                auto_previous_response_id=auto_previous_response_id,
            )
        )
    validate_session_conversation_settings(
        session,
        conversation_id=conversation_id,
        previous_response_id=previous_response_id,
        auto_previous_response_id=auto_previous_response_id,
    )


def validate_streamed_start(
    agent: Any,
    input: Any,
    run_config: RunConfig | None,
    *,
    conversation_id: str | None,
    previous_response_id: str | None,
    auto_previous_response_id: bool,
) -> None:
    """The check ``Runner.run_streamed`` makes at the call (output guardrails cannot be
    combined with server-managed history); the SDK has it since 0.22, and ``run`` makes
    it inside the run loop, where a durable run makes it too."""
    from agents.run_internal import agent_runner_helpers

    check = getattr(
        agent_runner_helpers, "validate_output_guardrails_with_server_managed_conversation", None
    )
    if check is None:
        return
    current = getattr(input, "_current_agent", None)
    check(
        current if current is not None else agent,
        run_config if run_config is not None else RunConfig(),
        conversation_id=conversation_id,
        previous_response_id=previous_response_id,
        auto_previous_response_id=auto_previous_response_id,
    )


def tool_invocation(output: Any, is_sdk_generated_error: bool) -> Any:
    """The SDK's invocation record for a replayed tool call."""
    return ToolInvocation(output, is_sdk_generated_error=is_sdk_generated_error)


def invocation_fields(invocation: Any) -> tuple[Any, bool]:
    return invocation.output, bool(invocation.is_sdk_generated_error)


def is_agent_tool(tool: FunctionTool) -> bool:
    """True for ``Agent.as_tool()``: its nested run records its own model and tool calls."""
    return bool(getattr(tool, "_is_agent_tool", False))


def agent_of_tool(tool: FunctionTool) -> Any:
    """The agent an ``Agent.as_tool()`` tool runs (None for any other tool)."""
    return getattr(tool, "_agent_instance", None) if is_agent_tool(tool) else None


def handoff_target(handoff: Any) -> Any:
    """The agent a ``Handoff`` built by ``handoff(agent)`` hands off to, if still alive
    (the SDK keeps only a weak reference; None for a hand-built ``Handoff``)."""
    ref = getattr(handoff, "_agent_ref", None)
    return ref() if ref is not None else None


def new_streaming_result(cls: type[RunResultStreaming], **fields: Any) -> RunResultStreaming:
    """A streaming result before its run started, built as ``Runner.run_streamed`` does
    (its output schema field is private)."""
    return cls(_current_agent_output_schema=None, **fields)


def resumed_fields(state: Any) -> dict[str, Any]:
    """What ``Runner.run_streamed`` shows on its result at once when resuming ``state``
    (before its run loop starts): the state's input, items, responses, turn, guardrail
    results and persisted-item count (all private fields of ``RunState``)."""
    original = getattr(state, "_original_input", None)
    return {
        "input": original if isinstance(original, str) else list(original or []),
        "new_items": list(getattr(state, "_session_items", None) or []),
        "raw_responses": list(getattr(state, "_model_responses", None) or []),
        "current_turn": getattr(state, "_current_turn", 0) or 0,
        "input_guardrail_results": list(getattr(state, "_input_guardrail_results", None) or []),
        "output_guardrail_results": list(getattr(state, "_output_guardrail_results", None) or []),
        "_current_turn_persisted_item_count": getattr(
            state, "_current_turn_persisted_item_count", 0
        ),
    }


def request_id_of(response: Any) -> str | None:
    """The OpenAI request id a streamed ``Response`` carries (the client sets it)."""
    value = getattr(response, "_request_id", None)
    return value if isinstance(value, str) else None
