"""Durable clones of agents: tool calls become steps, handoffs lead to durable clones.

The user's agents and tools are never mutated: each drive of a run works on clones
(``Agent.clone`` with new ``tools``/``handoffs`` lists, tools copied with
``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, FunctionTool, Handoff, RunConfig
from agents.models.interface import Model
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext

from perdure.context import StepKind, StepSpec
from perdure.retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy
from perdure.spi import recording_run
from perdure_openai_agents._codec import encode_tool_output
from perdure_openai_agents._model import DurableModel, DurableProvider

_MARK = "_perdure_durable_clone"
_TOOL_SPEC = "_perdure_tool_spec"


@dataclass
class Drive:
    """State of one drive of one run, visible to every task the SDK spawns in it."""

    run_id: str
    run_config: RunConfig | None = None
    clones: dict[int, tuple[Agent[Any], Agent[Any]]] = field(default_factory=lambda: {})


DRIVE: ContextVar[Drive | None] = ContextVar("perdure_openai_agents_drive", default=None)


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


def _records_itself(tool: FunctionTool) -> bool:
    """True when the tool's function is a perdure step or effect: it records itself."""
    try:
        fn = tool.__wrapped__
    except AttributeError:
        return False
    return getattr(fn, "__perdure_step__", None) is not None


def _invoke_context(tool: FunctionTool, ctx: ToolContext[Any]) -> Any:
    try:
        from agents.tool import (
            _get_function_tool_invoke_context,  # pyright: ignore[reportPrivateUsage]
        )
    except ImportError:  # pragma: no cover - other SDK versions
        return ctx
    return _get_function_tool_invoke_context(tool, ctx)


def wrap_tool(tool: Any) -> Any:
    """A copy of ``tool`` whose calls are recorded steps (function tools only)."""
    if not isinstance(tool, FunctionTool):
        return tool  # hosted tools run inside the recorded model call
    spec: StepSpec | None = tool.__dict__.get(_TOOL_SPEC)
    if spec is None:
        if tool._is_agent_tool or _records_itself(tool):  # pyright: ignore[reportPrivateUsage]
            # An agent used as a tool: its nested run records its own model and tool
            # calls (see DurableAgentRunner). A perdure step/effect records itself.
            return tool
        spec = StepSpec(f"tool:{tool.name}", "step", NO_RETRY)
    original = tool.on_invoke_tool
    step_spec = spec

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        run = recording_run()
        invoke_ctx = _invoke_context(tool, ctx)
        if run is None:
            return await original(invoke_ctx, input)

        async def call() -> Any:
            value = await original(invoke_ctx, input)
            return encode_tool_output(value, ctx.tool_call)

        return await run.step(step_spec, call, (), {})

    on_invoke_tool.__annotations__ = {"ctx": ToolContext, "input": str, "return": Any}
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def _wrap_handoff(entry: Any, drive: Drive) -> Any:
    if isinstance(entry, Agent):
        return durable_clone(entry, drive)
    if not isinstance(entry, Handoff):
        return entry
    original: Callable[[RunContextWrapper[Any], str], Awaitable[Any]] = entry.on_invoke_handoff

    async def on_invoke_handoff(ctx: RunContextWrapper[Any], input_json: str) -> Any:
        target = await original(ctx, input_json)
        return durable_clone(target, drive) if isinstance(target, Agent) else target

    wrapped = dataclasses.replace(entry, on_invoke_handoff=on_invoke_handoff)
    wrapped._agent_ref = entry._agent_ref  # pyright: ignore[reportPrivateUsage]
    return wrapped


def is_durable_clone(agent: Agent[Any]) -> bool:
    return bool(agent.__dict__.get(_MARK))


def durable_clone(agent: Agent[Any], drive: Drive) -> Agent[Any]:
    """The durable clone of ``agent`` for this drive (memoized: handoff graphs may cycle)."""
    if is_durable_clone(agent):
        return agent
    hit = drive.clones.get(id(agent))
    if hit is not None and hit[0] is agent:
        return hit[1]
    changes: dict[str, Any] = {"tools": [wrap_tool(t) for t in agent.tools]}
    if isinstance(agent.model, Model) and not isinstance(agent.model, DurableModel):
        changes["model"] = DurableModel.wrapping(agent.model)
        changes["model_settings"] = agent.model_settings
    clone = agent.clone(**changes)
    clone.__dict__[_MARK] = True
    drive.clones[id(agent)] = (agent, clone)
    clone.handoffs = [_wrap_handoff(h, drive) for h in agent.handoffs]
    return clone


def durable_run_config(run_config: RunConfig | dict[str, Any] | None, run_id: str) -> RunConfig:
    """``run_config`` with a recording model provider, a stable group id and, without an
    ``OPENAI_API_KEY``, tracing export off."""
    if isinstance(run_config, dict):
        base = RunConfig(**run_config)  # pyright: ignore[reportUnknownArgumentType]
        owned = "model_provider" not in run_config
    elif run_config is None:
        base, owned = RunConfig(), True
    else:
        base, owned = run_config, False
    if isinstance(base.model_provider, DurableProvider):
        return base
    changes: dict[str, Any] = {"model_provider": DurableProvider(base.model_provider, owned=owned)}
    if isinstance(base.model, Model):
        changes["model"] = DurableModel.wrapping(base.model)
    if not base.tracing_disabled and not os.environ.get("OPENAI_API_KEY"):
        changes["tracing_disabled"] = True
    if base.group_id is None:
        changes["group_id"] = run_id
    return dataclasses.replace(base, **changes)


def _durable_args(agent: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    drive = DRIVE.get()
    if drive is None or recording_run() is None:
        return agent, kwargs
    if isinstance(agent, Agent):
        agent = durable_clone(agent, drive)  # pyright: ignore[reportUnknownArgumentType]
    run_config = kwargs.get("run_config")
    if run_config is None and drive.run_config is not None:
        kwargs["run_config"] = drive.run_config
    elif not (
        isinstance(run_config, RunConfig) and isinstance(run_config.model_provider, DurableProvider)
    ):
        kwargs["run_config"] = durable_run_config(run_config, drive.run_id)
    return agent, kwargs


class DurableAgentRunner:
    """The SDK's default runner, made durable inside a run.

    An agent used as a tool runs a nested ``Runner.run`` on the *original* agent object;
    inside a durable run this swaps in its durable clone (and a recording run config), so
    the nested model and tool calls are steps of the enclosing run. Outside a run, and
    for every other call, it only delegates.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        starting_agent, kwargs = _durable_args(starting_agent, kwargs)
        return await self.inner.run(starting_agent, input, **kwargs)

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **kwargs)

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        starting_agent, kwargs = _durable_args(starting_agent, kwargs)
        return self.inner.run_streamed(starting_agent, input, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def install_runner_hook() -> None:
    """Make the SDK's default runner durable-aware (idempotent; plain runs unaffected)."""
    from agents.run import get_default_agent_runner, set_default_agent_runner

    current = get_default_agent_runner()
    if not isinstance(current, DurableAgentRunner):
        set_default_agent_runner(DurableAgentRunner(current))  # type: ignore[arg-type]
