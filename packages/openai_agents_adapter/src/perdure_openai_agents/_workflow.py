"""The perdure workflow every ``DurableRunner`` run is: ``openai_agents.run``.

In the process that started the run, driving it runs the SDK's own ``Runner`` on the
user's own objects (agent, context, hooks, session); model and function-tool calls are
steps (``_wrap``), session operations too (``_sessions``). A worker that resumes the run
after a crash re-creates those objects from the run's input: by import locator (or
factory) for the agent, hooks, run config and session, from recorded data for the
context and the input; what it cannot re-create parks the run with a message that says
what to provide. In the durable approval style pending tool approvals become durable
waits for the ``approval`` signal; recorded decisions are re-applied on every replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import typing
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from agents import Agent, RunConfig, Runner
from agents.exceptions import AgentsException
from agents.lifecycle import RunHooksBase
from agents.result import RunResult, RunResultStreaming
from agents.run_state import RunState

import perdure
from perdure.spi import (
    RetryPolicy,
    SerializationError,
    current_run,
    from_jsonable,
    resolve_locator,
    to_jsonable,
)
from perdure_openai_agents import _sessions
from perdure_openai_agents._errors import record_raised
from perdure_openai_agents._model import determinism_error
from perdure_openai_agents._wrap import DRIVE, Drive, install_hooks

WORKFLOW_NAME = "openai_agents.run"

_END = object()


#: The public lists of a streamed result that its run loop extends.
RESULT_LISTS = (
    "new_items",
    "raw_responses",
    "input_guardrail_results",
    "output_guardrail_results",
    "tool_input_guardrail_results",
    "tool_output_guardrail_results",
)


class StreamSink:
    """Carries a run's stream events from the drive in this process to its consumer,
    with the SDK's streamed result they came from."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        #: Segments (the run up to the first approval, then after each) whose events this
        #: consumer already received: a re-drive in this process does not repeat them.
        self.forwarded: set[int] = set()
        self.inner: RunResultStreaming | None = None
        #: The caller's streamed result (``DurableRunResultStreaming``), and how many
        #: items each of its lists held when it was handed to the caller.
        self.outer: RunResultStreaming | None = None
        self.shown: dict[str, int] = {}
        #: ``cancel(mode)`` asked for before the SDK's streamed run existed.
        self.cancel_mode: str | None = None

    def attach(self, inner: RunResultStreaming, *, first: bool) -> None:
        self.inner = inner
        outer = self.outer
        if first and outer is not None:
            # What the caller put in its result's lists before the run began is the
            # run's to continue from, as with the SDK's own streamed result.
            for name in RESULT_LISTS:
                own = list(vars(outer).get(name) or [])  # its own, not the live view
                added = own[self.shown.get(name, 0) :]
                if added:
                    setattr(inner, name, [*added, *getattr(inner, name)])
        if self.cancel_mode is not None:
            inner.cancel(mode=self.cancel_mode)  # type: ignore[arg-type]

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
    input: Any = None
    context: Any = None
    has_context: bool = False
    hooks: Any = None
    run_config: Any = None
    session: Any = None
    error_handlers: Any = None
    model_retry: RetryPolicy | None = None
    sink: StreamSink | None = None
    #: Rebuilding a finished run's result by replaying its history in this process:
    #: no hooks, no tracing (nothing runs again, so nothing is reported again).
    rebuilding: bool = False
    result: RunResult | RunResultStreaming | None = None
    error: BaseException | None = None
    #: The task driving the run in this process, while it does: a caller cancelled
    #: while waiting for the run cancels it, as cancelling ``Runner.run`` would.
    task: asyncio.Task[Any] | None = None


#: Per run id, in the process that started it.
LOCAL: dict[str, Local] = {}


def _perdure_cause(exc: BaseException) -> perdure.PerdureError | None:
    """The perdure error behind an SDK error (the SDK wraps tool errors in UserError)
    that must stop the drive: a lost lease, a determinism mismatch, an unknown outcome.
    A failed step is user code failing, and stays the error it was."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, perdure.PerdureError) and not isinstance(cur, perdure.StepFailedError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
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


async def _segment(
    agent: Agent[Any],
    input: Any,
    segment: int,
    *,
    stream: bool,
    sink: StreamSink | None,
    options: dict[str, Any],
) -> RunResult | RunResultStreaming:
    """One SDK run (``Runner.run`` or ``run_streamed``) up to the end or the next
    approvals."""
    if not stream:
        return await Runner.run(agent, input, **options)
    streamed = Runner.run_streamed(agent, input, **options)
    forward = sink is not None and segment not in sink.forwarded
    if forward and sink is not None:
        sink.attach(streamed, first=segment == 0)
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


def _missing(run_id: str, what: str, detail: str) -> perdure.DeterminismError:
    """This process cannot re-create part of the run: park it (another worker, or this
    one given what is missing, can resume it) instead of failing it."""
    return determinism_error(perdure.DeterminismError(run_id, what, detail))


def _resolve_here(ref: str, what: str, run_id: str) -> Any:
    try:
        return resolve_locator(ref, what=what)
    except perdure.ConfigurationError as exc:
        raise _missing(run_id, what, str(exc)) from exc


def _built(ref: str, what: str, run_id: str, kind: type[Any] | None = None) -> Any:
    """The object a locator names; a callable that is not of ``kind`` is a factory."""
    obj = _resolve_here(ref, what, run_id)
    if kind is not None and not isinstance(obj, kind) and callable(obj):
        obj = obj()
    if kind is not None and not isinstance(obj, kind):
        raise _missing(run_id, what, f"{ref!r} names a {type(obj).__name__}, not a {what}")
    return obj


async def _rebuilt(spec: dict[str, Any], run_id: str) -> Local:
    """What a worker re-creates from the run's input."""
    local = Local()
    ref = spec.get("agent")
    if not ref:
        raise _missing(
            run_id,
            "agent",
            f"agent {spec.get('agent_name')!r} was built in the process that started the "
            "run (it is no module-level attribute), so this worker cannot re-create it: "
            "start the run with agent_ref='module:attribute' naming the agent or a "
            "factory that builds it",
        )
    local.agent = agent = _built(ref, "agent", run_id, Agent)
    register_agent_types(agent)  # before the context and input are decoded
    if spec.get("run_config"):
        local.run_config = _built(spec["run_config"], "run config", run_id, RunConfig)
    elif spec.get("run_config_unpersisted"):
        raise _missing(run_id, "run config", _unpersisted("run_config", spec))
    if spec.get("hooks"):
        local.hooks = _built(spec["hooks"], "hooks", run_id, RunHooksBase)
    elif spec.get("hooks_unpersisted"):
        raise _missing(run_id, "hooks", _unpersisted("hooks", spec))
    if spec.get("error_handlers"):
        local.error_handlers = _resolve_here(spec["error_handlers"], "error handlers", run_id)
    elif spec.get("error_handlers_unpersisted"):
        raise _missing(run_id, "error handlers", _unpersisted("error_handlers", spec))
    context = spec.get("context")
    if spec.get("context_ref"):
        factory = _resolve_here(spec["context_ref"], "context factory", run_id)
        data = None if context is None else context.get("value")
        local.context = factory(from_jsonable(data, f"context of run {run_id!r}"))
        local.has_context = True
    elif context is not None:
        if "unpersisted" in context:
            raise _missing(
                run_id,
                "context",
                f"the run's context (a {context['unpersisted']}) holds live objects that "
                "were not persisted, so this worker cannot rebuild it: start the run with "
                "context_ref='module:factory' (called with nothing, or with the context "
                "data) so a worker can",
            )
        local.context = from_jsonable(context.get("value"), f"context of run {run_id!r}")
        local.has_context = True
    if spec.get("session"):
        try:
            local.session = _sessions.rebuild(
                spec["session"], lambda ref, what: _resolve_here(ref, what, run_id)
            )
        except LookupError as exc:
            raise _missing(run_id, "session", str(exc)) from None
    raw = spec.get("input") or {}
    if "run_state" in raw:
        local.input = await RunState.from_json(agent, raw["run_state"])
    elif "value" in raw:
        local.input = from_jsonable(raw["value"], f"input of run {run_id!r}")
    else:
        raise _missing(
            run_id, "input", f"the run's input (a {raw.get('unpersisted')}) was not persisted"
        )
    return local


def _unpersisted(name: str, spec: dict[str, Any]) -> str:
    return (
        f"the run's {name} ({spec.get(name + '_unpersisted')}) was created in the process "
        f"that started the run and is no module-level attribute: pass {name}_ref="
        "'module:attribute' so a worker can re-create it"
    )


def _options(spec: dict[str, Any], local: Local) -> dict[str, Any]:
    run_config = local.run_config
    if local.rebuilding:
        base = run_config if isinstance(run_config, RunConfig) else RunConfig()
        run_config = dataclasses.replace(base, tracing_disabled=True)
    options: dict[str, Any] = {
        "context": local.context if local.has_context else None,
        "max_turns": spec.get("max_turns"),
        "hooks": None if local.rebuilding else local.hooks,
        "run_config": run_config,
        "previous_response_id": spec.get("previous_response_id"),
        "auto_previous_response_id": bool(spec.get("auto_previous_response_id")),
        "conversation_id": spec.get("conversation_id"),
        "session": _sessions.journaled(local.session),
    }
    if local.error_handlers is not None:
        options["error_handlers"] = local.error_handlers
    return options


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
    objects = local if local is not None and local.agent is not None else None
    if objects is None:
        objects = await _rebuilt(spec, run_id)
    objects.task = asyncio.current_task()
    assert objects.agent is not None
    agent = objects.agent
    register_agent_types(agent)
    stream = bool(spec.get("stream"))
    sink = objects.sink
    options = _options(spec, objects)
    token = DRIVE.set(Drive(run_id, objects.model_retry))
    try:
        segment = 0
        result = await _segment(
            agent, objects.input, segment, stream=stream, sink=sink, options=options
        )
        while spec.get("approvals") == "durable" and result.interruptions:
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
            options["context"] = None
            result = await _segment(
                agent, state, segment, stream=stream, sink=sink, options=options
            )
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and not task.cancelling():
            objects.error = exc  # raised by the run's own code (a session, a tool)
        raise
    except Exception as exc:
        cause = _perdure_cause(exc)
        if cause is not None and cause is not exc:
            raise cause from exc
        objects.error = exc
        if isinstance(exc, AgentsException):
            await record_raised(exc)
        raise
    finally:
        DRIVE.reset(token)
    objects.result = result
    try:
        final: Any = to_jsonable(result.final_output, "final output")
        as_text = False
    except SerializationError:
        final, as_text = str(result.final_output), True
    return {
        "final_output": final,
        "final_output_as_text": as_text,
        "last_agent": result.last_agent.name,
        "interruptions": len(result.interruptions),
    }


@perdure.workflow(name=WORKFLOW_NAME)
async def agent_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One durable Agents SDK run (see ``DurableRunner``)."""
    install_hooks()
    ctx = current_run.get()
    run_id = ctx.run_id if ctx is not None else f"plain-{uuid.uuid4().hex}"
    return await _drive(spec, run_id, LOCAL.get(run_id))
