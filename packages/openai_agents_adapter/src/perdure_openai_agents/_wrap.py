"""Model and tool calls of a durable run become steps, on the user's own objects.

Nothing is cloned: the run loop resolves each model and invokes each function tool
through two hooks (see ``_compat``) that, while a durable run is driven in the current
context, record the call as a step — and replay it from the history after a crash.
Outside a durable run they only delegate.
"""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agents import FunctionTool
from agents.models.interface import Model
from agents.tool_context import ToolContext

from perdure.spi import DEFAULT_RETRY, NO_RETRY, RetryPolicy, StepKind, StepSpec, recording_run
from perdure_openai_agents import _compat
from perdure_openai_agents._codec import encode_tool_output, tool_record
from perdure_openai_agents._errors import raise_step_failure
from perdure_openai_agents._model import DurableModel

_TOOL_SPEC = "_perdure_tool_spec"


@dataclass
class Drive:
    """State of one drive of one run, visible to every task the SDK spawns in it."""

    run_id: str
    model_retry: RetryPolicy | None = None
    models: dict[int, tuple[Model, DurableModel]] = field(default_factory=lambda: {})


DRIVE: ContextVar[Drive | None] = ContextVar("perdure_openai_agents_drive", default=None)


def in_durable_run() -> bool:
    """True inside a durable agent run this process drives (outside any step)."""
    return DRIVE.get() is not None and recording_run() is not None


def durable_tool(
    tool: FunctionTool,
    *,
    kind: StepKind = "effect",
    idempotent_receiver: bool = False,
    name: str | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> FunctionTool:
    """Declare how a tool's calls are recorded, for tools whose function is not
    decorated with ``@perdure.effect`` / ``@perdure.step`` (MCP-backed or hand-built
    ``FunctionTool`` objects, or an agent used as a tool, recorded then as one step).

    ``kind="effect"`` applies intent-before-action: with ``idempotent_receiver=False`` a
    crash between the call and its record parks the run as needs-attention instead of
    calling again. Exceptions that escape the tool are retried by ``retry``; errors the
    SDK turns into a model-visible message are recorded as that message. Returns a copy.
    """
    copy = dataclasses.replace(tool)
    spec = StepSpec(name or f"tool:{tool.name}", kind, retry, idempotent_receiver)
    copy.__dict__[_TOOL_SPEC] = spec
    return copy


def declared_spec(tool: FunctionTool) -> StepSpec | None:
    """How ``durable_tool`` declared ``tool``'s calls are recorded, if it did."""
    return tool.__dict__.get(_TOOL_SPEC)


def _records_itself(tool: FunctionTool) -> bool:
    """True when the tool's function is a perdure step or effect: it records itself."""
    fn = getattr(tool, "__wrapped__", None)
    return getattr(fn, "__perdure_step__", None) is not None


def _model_hook(model: Model) -> Model:
    drive = DRIVE.get()
    if drive is None or not in_durable_run() or isinstance(model, DurableModel):
        return model
    hit = drive.models.get(id(model))
    if hit is None or hit[0] is not model:
        hit = (model, DurableModel.wrapping(model, retry=drive.model_retry))
        drive.models[id(model)] = hit
    return hit[1]


async def _tool_hook(
    invoke: _compat.ToolInvoker, tool: FunctionTool, context: ToolContext[Any], arguments: str
) -> Any:
    run = recording_run()
    if run is None or DRIVE.get() is None:
        return await invoke(function_tool=tool, context=context, arguments=arguments)
    spec = declared_spec(tool)
    if spec is None:
        if _compat.is_agent_tool(tool) or _records_itself(tool):
            # An agent used as a tool: its nested run records its own model and tool
            # calls. A perdure step/effect records itself.
            return await invoke(function_tool=tool, context=context, arguments=arguments)
        spec = StepSpec(f"tool:{tool.name}", "step", NO_RETRY)
    live: list[Any] = []

    async def call() -> dict[str, Any]:
        invocation = await invoke(function_tool=tool, context=context, arguments=arguments)
        live.append(invocation)
        output, sdk_error = _compat.invocation_fields(invocation)
        return {"output": encode_tool_output(output, context.tool_call), "sdk_error": sdk_error}

    with raise_step_failure():
        record: dict[str, Any] = await run.step(spec, call, (), {})
    if live:  # called now: the SDK continues with the tool's own return value
        return live[0]
    output, sdk_error = tool_record(
        record, f"recorded call of tool {tool.name!r} of run {run.run_id!r}"
    )
    return _compat.tool_invocation(output, sdk_error)


def install_hooks() -> None:
    """Make model and function-tool calls of durable runs steps (idempotent)."""
    _compat.install(_model_hook, _tool_hook)
