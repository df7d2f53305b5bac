"""The perdure workflow every ``DurableRunner`` run is: ``openai_agents.run``.

Its input names the agent by import locator; driving it (first time, or replaying after
a crash in a worker) re-creates the agent, clones it durably and runs ``Runner.run``.
Pending tool approvals become durable waits for the ``approval`` signal; recorded
decisions are re-applied on every replay.
"""

from __future__ import annotations

import asyncio
import json
import time
import typing
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from agents import Agent, RunConfig, Runner
from agents.lifecycle import RunHooksBase
from agents.memory.session_settings import SessionSettings
from agents.result import RunResult, RunResultStreaming
from agents.run_state import RunState

import perdure
from perdure.context import current_run
from perdure.errors import SerializationError
from perdure.locate import resolve
from perdure.serialization import from_jsonable, to_jsonable
from perdure_openai_agents._model import DurableProvider, determinism_error
from perdure_openai_agents._wrap import (
    DRIVE,
    Drive,
    durable_clone,
    durable_run_config,
    install_runner_hook,
)
from perdure_openai_agents.session import PerdureSession

WORKFLOW_NAME = "openai_agents.run"

_END = object()


class StreamSink:
    """Carries a run's stream events from the drive in this process to its consumer."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        #: Segments (the run up to the first approval, then after each) whose events this
        #: consumer already received: a re-drive in this process does not repeat them.
        self.forwarded: set[int] = set()

    def put(self, event: Any) -> None:
        self.queue.put_nowait(event)

    def close(self) -> None:
        self.queue.put_nowait(_END)

    async def events(self) -> AsyncIterator[Any]:
        while True:
            event = await self.queue.get()
            if event is _END:
                return
            yield event


@dataclass
class Local:
    """What the process that started a run holds for it; a worker rebuilds it from the
    run's input instead."""

    agent: Agent[Any] | None = None
    context: Any = None
    has_context: bool = False
    hooks: Any = None
    run_config: Any = None
    session: Any = None
    sink: StreamSink | None = None
    result: RunResult | RunResultStreaming | None = None


#: Per run id, in the process that started it.
LOCAL: dict[str, Local] = {}


def _perdure_cause(exc: BaseException) -> perdure.PerdureError | None:
    """The perdure error behind an SDK error (the SDK wraps tool errors in UserError)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, perdure.PerdureError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _approval_details(item: Any, run_id: str) -> dict[str, Any]:
    raw = getattr(item, "arguments", None)
    try:
        arguments: Any = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = raw
    agent = getattr(item, "agent", None)
    details = {
        "kind": "tool_approval",
        "tool": getattr(item, "tool_name", None) or getattr(item, "name", None),
        "arguments": arguments,
        "call_id": getattr(item, "call_id", None),
        "agent": getattr(agent, "name", None),
        "run_id": run_id,
        "requested_at": time.time(),
    }
    try:
        return to_jsonable(details)
    except SerializationError:
        details["arguments"] = str(raw)
        return details


def _decision(payload: Any) -> tuple[bool, str | None]:
    if isinstance(payload, bool):
        return payload, None
    if isinstance(payload, dict):
        message = payload.get("message")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        return bool(payload.get("approved")), None if message is None else str(message)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    raise perdure.PermanentError(
        f"approval signal payload {payload!r} is neither a bool nor "
        '{"approved": bool, "message": str | None}'
    )


def _session_from_spec(data: Any) -> PerdureSession | None:
    if not data:
        return None
    limit = data.get("limit")
    settings = SessionSettings(limit=limit) if limit is not None else None
    return PerdureSession(data["session_id"], url=data.get("url"), session_settings=settings)


async def _segment(
    agent: Agent[Any],
    input: Any,
    segment: int,
    *,
    stream: bool,
    sink: StreamSink | None,
    context: Any,
    max_turns: int | None,
    hooks: Any,
    run_config: RunConfig,
    session: Any,
) -> RunResult | RunResultStreaming:
    """One ``Runner.run`` (or ``run_streamed``) up to the end or the next approvals."""
    if not stream:
        return await Runner.run(
            agent,
            input,
            context=context,
            max_turns=max_turns,
            hooks=hooks,
            run_config=run_config,
            session=session,
        )
    streamed = Runner.run_streamed(
        agent,
        input,
        context=context,
        max_turns=max_turns,
        hooks=hooks,
        run_config=run_config,
        session=session,
    )
    forward = sink is not None and segment not in sink.forwarded
    async for event in streamed.stream_events():
        if forward and sink is not None:
            sink.put(event)
    task = streamed.run_loop_task
    if task is not None and task.done() and not task.cancelled():
        failure = task.exception()
        if failure is not None and not isinstance(failure, Exception):
            raise failure  # a perdure interrupt (suspend, park, cancel) from the run loop
    if forward and sink is not None:
        sink.forwarded.add(segment)
    return streamed


def _resolve_here(ref: str, what: str, run_id: str) -> Any:
    """Resolve a locator while driving: a miss parks the run (this worker runs other
    code than the run started on) instead of failing it."""
    try:
        return resolve(ref, what=what)
    except perdure.ConfigurationError as exc:
        raise determinism_error(perdure.DeterminismError(run_id, what, str(exc))) from exc


def register_agent_types(agent: Agent[Any], seen: set[int] | None = None) -> None:
    """Stored outputs and contexts rebuild only registered types: register the ones this
    agent and the agents it hands off to declare (``output_type``, ``Agent[Context]``)."""
    seen = set() if seen is None else seen
    if id(agent) in seen:
        return
    seen.add(id(agent))
    perdure.register_type(
        agent.output_type, *typing.get_args(getattr(agent, "__orig_class__", None))
    )
    for handoff in agent.handoffs:
        if isinstance(handoff, Agent):
            register_agent_types(cast(Agent[Any], handoff), seen)


async def _drive(spec: dict[str, Any], run_id: str, local: Local | None) -> dict[str, Any]:
    if local is not None and local.agent is not None:
        agent = local.agent
    else:
        agent = _resolve_here(spec["agent"], "agent", run_id)
    if not isinstance(agent, Agent):
        raise perdure.ConfigurationError(
            f"{spec['agent']!r} names a {type(agent).__name__}, not an agent"
        )
    register_agent_types(agent)
    run_config: Any = None
    if local is not None and local.run_config is not None:
        run_config = local.run_config
    elif spec.get("run_config"):
        run_config = _resolve_here(spec["run_config"], "run config", run_id)
    hooks: Any = None
    if local is not None and local.hooks is not None:
        hooks = local.hooks
    elif spec.get("hooks"):
        hooks = _resolve_here(spec["hooks"], "hooks", run_id)
        if not isinstance(hooks, RunHooksBase):
            raise perdure.ConfigurationError(f"{spec['hooks']!r} is not a RunHooks")
    if local is not None and local.has_context:
        context = local.context
    else:
        context = from_jsonable(spec.get("context"), f"context of run {run_id!r}")
    if local is not None and local.session is not None:
        session = local.session
    else:
        session = _session_from_spec(spec.get("session"))
    stream = bool(spec.get("stream"))
    sink = local.sink if local is not None else None

    config = durable_run_config(run_config, run_id)
    drive = Drive(run_id, config)
    token = DRIVE.set(drive)
    try:
        start = durable_clone(agent, drive)
        common: dict[str, Any] = {
            "stream": stream,
            "sink": sink,
            "max_turns": spec.get("max_turns"),
            "hooks": hooks,
            "run_config": config,
            "session": session,
        }
        segment = 0
        result = await _segment(start, spec["input"], segment, context=context, **common)
        while result.interruptions:
            state: RunState[Any] = result.to_state()
            for item in result.interruptions:
                payload = await perdure.wait_for_signal(
                    perdure.APPROVAL, details=_approval_details(item, run_id)
                )
                approved, message = _decision(payload)
                if approved:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=message)
            segment += 1
            result = await _segment(start, state, segment, context=None, **common)
    except Exception as exc:
        cause = _perdure_cause(exc)
        if cause is not None and cause is not exc:
            raise cause from exc
        raise
    finally:
        DRIVE.reset(token)
        provider = config.model_provider
        if isinstance(provider, DurableProvider):
            await provider.aclose()
    if local is not None:
        local.result = result
    try:
        final: Any = to_jsonable(result.final_output, "final output")
        as_text = False
    except SerializationError:
        final, as_text = str(result.final_output), True
    return {
        "final_output": final,
        "final_output_as_text": as_text,
        "last_agent": result.last_agent.name,
    }


@perdure.workflow(name=WORKFLOW_NAME)
async def agent_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One durable Agents SDK run (see ``DurableRunner``)."""
    install_runner_hook()
    ctx = current_run.get()
    run_id = ctx.run_id if ctx is not None else f"plain-{uuid.uuid4().hex}"
    return await _drive(spec, run_id, LOCAL.get(run_id))
