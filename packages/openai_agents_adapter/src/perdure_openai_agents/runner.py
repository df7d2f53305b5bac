"""``DurableRunner``: ``agents.Runner`` with durability — replace the name, keep the code."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from agents import Agent, RunConfig, RunContextWrapper, RunHooks
from agents.items import TResponseInputItem
from agents.memory.session import Session
from agents.result import RunResult, RunResultStreaming
from agents.run import DEFAULT_MAX_TURNS
from agents.run_state import RunState
from agents.stream_events import StreamEvent

import perdure
from perdure import Backend, ConfigurationError, RunHandle, RunInfo, RunStatus
from perdure.spi import (
    DeterminismError,
    Event,
    EventKind,
    NeedsAttentionError,
    RetryPolicy,
    RunFailedError,
    SerializationError,
    check_replay,
    find_locator,
    from_jsonable,
    open_backend,
    resolve_locator,
    resolve_url,
    to_jsonable,
)
from perdure_openai_agents import _compat, _errors, _sessions
from perdure_openai_agents._workflow import LOCAL, RESULT_LISTS, Local, StreamSink, agent_run

Approvals = Literal["sdk", "durable"]

T = TypeVar("T")


class DurableRunResult(RunResult):
    """The SDK's ``RunResult`` of a durable run (every attribute and method its own),
    plus the run's ``run_id``."""

    run_id: str

    @classmethod
    def of(cls, result: RunResult, run_id: str) -> DurableRunResult:
        """A ``DurableRunResult`` holding ``result``'s state (``result`` is untouched)."""
        adopted = cls.__new__(cls)
        vars(adopted).update(vars(result))
        adopted.run_id = run_id
        return adopted

    @property
    def last_agent_name(self) -> str:
        return self.last_agent.name


@dataclass
class RecordedRunResult:
    """A durable run's outcome as recorded, when this process did not drive its end
    (a worker finished it, or it had finished before): no live SDK objects."""

    run_id: str
    final_output: Any
    last_agent_name: str

    def final_output_as(self, cls: type[T], raise_if_incorrect_type: bool = False) -> T:
        if raise_if_incorrect_type and not isinstance(self.final_output, cls):
            raise TypeError(f"final output is a {type(self.final_output).__name__}, not {cls}")
        return self.final_output  # type: ignore[no-any-return]


DurableResult = DurableRunResult | RecordedRunResult


async def _isolated(awaitable: Awaitable[T]) -> T:
    """Await in a fresh context: a run started from inside another run's step must not
    inherit that run's step position or key."""

    async def go() -> T:
        return await awaitable

    return await asyncio.get_running_loop().create_task(go(), context=contextvars.Context())


class DurableRunHandle:
    """A started durable agent run. ``await handle.result()`` waits for it (driving it
    in this process whenever it is due here, e.g. after an approval)."""

    def __init__(self, handle: RunHandle) -> None:
        self._handle = handle

    @property
    def run_id(self) -> str:
        return self._handle.run_id

    @property
    def backend(self) -> Backend:
        return self._handle.backend

    def __repr__(self) -> str:
        return f"<DurableRunHandle {self.run_id!r}>"

    async def info(self) -> RunInfo:
        return await self._handle.info()

    async def status(self) -> RunStatus:
        return await self._handle.status()

    async def history(self) -> list[Event]:
        return await self._handle.history()

    async def approve(
        self,
        *,
        by: str | None = None,
        token: str | None = None,
        message: str | None = None,
        request: str | None = None,
    ) -> str:
        """Approve the tool call the run waits for (approval request ``request``, by
        default the one pending now), as ``perdure.approve`` does: the ``Authorizer`` in
        force decides and its decision is recorded. Returns the request answered."""
        return await self._answer(True, by, token, message, request)

    async def reject(
        self,
        *,
        by: str | None = None,
        token: str | None = None,
        message: str | None = None,
        request: str | None = None,
    ) -> str:
        """Reject the tool call the run waits for; ``message`` is what the model sees."""
        return await self._answer(False, by, token, message, request)

    async def _answer(
        self,
        approved: bool,
        by: str | None,
        token: str | None,
        message: str | None,
        request: str | None,
    ) -> str:
        answer = self.backend.approve if approved else self.backend.reject
        answered = await answer(self.run_id, request, message=message, by=by, token=token)
        return answered.request

    async def cancel(self, *, by: str | None = None, token: str | None = None) -> RunInfo:
        """Cancel the run, as ``perdure.cancel`` does: the ``Authorizer`` in force decides
        and its decision is recorded."""
        return await self._handle.cancel(by=by, token=token)

    async def result(self, *, timeout: float | None = None) -> DurableResult:
        """Wait for the run to end and return the SDK's result of it — rebuilt from its
        history (by replaying it here, nothing executes) when another process drove its
        end. An SDK exception the run ended with is raised as that exception."""
        local = LOCAL.get(self.run_id)
        # The run's own exception is raised after the handlers, not from inside one:
        # raised there it would get perdure's error as its ``__context__`` in place of
        # the context the SDK gave it.
        own: BaseException | None = None
        value: Any = None  # the run's result, once it has one (else ``own`` is raised)
        try:
            value = await _isolated(self._handle.result(timeout=timeout))
        except (NeedsAttentionError, DeterminismError, TimeoutError):
            raise  # the run may still finish here later: keep what this process holds
        except asyncio.CancelledError:
            LOCAL.pop(self.run_id, None)
            me = asyncio.current_task()
            own = None if local is None else local.error
            if not isinstance(own, asyncio.CancelledError) or me is None or me.cancelling():
                await _stop_driving(local)  # a cancel of the caller: stop the drive too
                raise
        except RunFailedError as failed:
            LOCAL.pop(self.run_id, None)
            own = None if local is None else local.error
            if own is None:
                raised = await self._recorded_exception(local)
                if raised is not None:
                    raise raised from failed
                raise
        except BaseException:
            LOCAL.pop(self.run_id, None)
            raise
        if own is not None:
            _errors.raise_as_is(own)
        LOCAL.pop(self.run_id, None)
        live = None if local is None else local.result
        if live is None and local is not None and local.agent is not None:
            live = await self._replayed(local)
        if isinstance(live, DurableRunResult):
            return live
        if isinstance(live, RunResultStreaming):
            return live  # type: ignore[return-value]
        if isinstance(live, RunResult):
            return DurableRunResult.of(live, self.run_id)
        return recorded_result(self.run_id, value)

    async def _recorded_exception(self, local: Local | None) -> BaseException | None:
        if local is None or local.agent is None:
            return None
        for event in reversed(await self.history()):
            name = event.step_key or ""
            if event.kind is EventKind.STEP_COMPLETED and name.endswith(":agents:raised"):
                data = (event.data or {}).get("result")
                if isinstance(data, dict):
                    return _errors.rebuild(data, local.agent, local.run_config)  # pyright: ignore[reportUnknownArgumentType]
        return None

    async def _replayed(self, local: Local) -> RunResult | RunResultStreaming | None:
        """The run's result, by replaying its recorded history in memory here."""
        info = await self._handle.info()
        history = await self._handle.history()
        again = dataclasses.replace(local, rebuilding=True, result=None, error=None)
        LOCAL[self.run_id] = again
        try:
            await _isolated(check_replay(info, history))
        finally:
            LOCAL.pop(self.run_id, None)
        return again.result


async def _stop_driving(local: Local | None) -> None:
    """The caller of a run this process drives was cancelled: cancel the drive, as
    cancelling ``Runner.run`` cancels its run loop (the SDK's own cancellation handling
    runs, and what it saves is recorded), and wait for it to settle. The run itself is
    not cancelled: it stays resumable, like a run whose process stopped, for a worker
    or ``handle.cancel()``."""
    task = None if local is None else local.task
    if task is None or task.done() or task is asyncio.current_task():
        return
    task.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.shield(task)


def recorded_result(run_id: str, value: Any) -> RecordedRunResult:
    data: dict[str, Any] = value if isinstance(value, dict) else {}
    final = data.get("final_output")
    if not data.get("final_output_as_text"):
        final = from_jsonable(final, f"final output of run {run_id!r}")
    return RecordedRunResult(run_id, final, str(data.get("last_agent", "")))


def _persisted_input(input: Any) -> dict[str, Any]:
    if isinstance(input, RunState):
        try:
            return {"run_state": to_jsonable(input.to_json(), "run state")}
        except Exception:  # a context the SDK cannot serialize
            return {"unpersisted": "RunState"}
    try:
        return {"value": to_jsonable(input, "input")}
    except SerializationError:
        return {"unpersisted": type(input).__name__}


def _ref(obj: Any, given: str | None, spec: dict[str, Any], name: str) -> None:
    """Record where a worker finds ``obj`` (or that it cannot)."""
    if obj is None:
        return
    if given is not None:
        resolve_locator(given, what=name.replace("_", " "), given=True)  # a bad one fails now
        spec[name] = given
        return
    found = find_locator(obj)
    if found is not None:
        spec[name] = found
    else:
        spec[name + "_unpersisted"] = type(obj).__qualname__


def _prepare(
    starting_agent: Agent[Any],
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    context: Any,
    max_turns: int | None,
    hooks: RunHooks[Any] | None,
    run_config: RunConfig | None,
    error_handlers: Any,
    previous_response_id: str | None,
    auto_previous_response_id: bool,
    conversation_id: str | None,
    session: Session | None,
    agent_ref: str | None,
    run_config_ref: str | None,
    hooks_ref: str | None,
    session_ref: str | None,
    context_ref: str | None,
    error_handlers_ref: str | None,
    model_retry: RetryPolicy | None,
    stream: bool,
    approvals: Approvals,
) -> tuple[dict[str, Any], Local]:
    if not isinstance(starting_agent, Agent):
        raise ConfigurationError(f"DurableRunner needs an Agent, not {type(starting_agent)!r}")
    _compat.validate_run_arguments(
        hooks,
        session,
        input=input,
        conversation_id=conversation_id,
        previous_response_id=previous_response_id,
        auto_previous_response_id=auto_previous_response_id,
    )
    if approvals not in ("sdk", "durable"):
        raise ConfigurationError(f"approvals must be 'sdk' or 'durable', not {approvals!r}")
    spec: dict[str, Any] = {
        "agent": None,
        "agent_name": starting_agent.name,
        "input": _persisted_input(input),
        "max_turns": max_turns,
        "previous_response_id": previous_response_id,
        "auto_previous_response_id": auto_previous_response_id,
        "conversation_id": conversation_id,
        "stream": stream,
        "approvals": approvals,
    }
    if agent_ref is not None:
        target = resolve_locator(agent_ref, what="agent", given=True)
        if not isinstance(target, Agent) and not callable(target):
            raise ConfigurationError(
                f"agent_ref {agent_ref!r} names neither an Agent nor a factory"
            )
        spec["agent"] = agent_ref
    else:
        spec["agent"] = find_locator(starting_agent)
    _ref(run_config, run_config_ref, spec, "run_config")
    _ref(hooks, hooks_ref, spec, "hooks")
    _ref(error_handlers, error_handlers_ref, spec, "error_handlers")
    if context_ref is not None:
        resolve_locator(context_ref, what="context factory", given=True)
        spec["context_ref"] = context_ref
    if context is not None and not isinstance(input, RunState):
        try:
            spec["context"] = {"value": to_jsonable(context, "context")}
        except SerializationError:
            spec["context"] = {"unpersisted": type(context).__qualname__}
    spec["session"] = _sessions.describe(session, session_ref)
    local = Local(
        agent=starting_agent,
        input=input,
        context=context,
        has_context=context is not None,
        hooks=hooks,
        run_config=run_config,
        session=session,
        error_handlers=error_handlers,
        model_retry=model_retry,
    )
    return spec, local


async def _start(
    spec: dict[str, Any],
    local: Local,
    run_id: str | None,
    url: str | None,
    backend: Backend | None,
) -> DurableRunHandle:
    rid = run_id or uuid.uuid4().hex
    LOCAL[rid] = local

    async def go() -> RunHandle:
        target = backend or await perdure.connect(url)
        return await target.start(agent_run, (spec,), {}, run_id=rid)

    try:
        handle = await _isolated(go())
    except BaseException:
        LOCAL.pop(rid, None)
        raise
    return DurableRunHandle(handle)


#: What a streamed durable result keeps as its own rather than taking from the SDK's
#: streamed result of the drive: its event plumbing and its identity.
_OWN_FIELDS = frozenset(
    {
        "_event_queue",
        "_input_guardrail_queue",
        "run_loop_task",
        "_stream_consumers_stopped",
        "_active_stream_consumers",
        "run_id",
        "handle",
    }
)


class DurableRunResultStreaming(RunResultStreaming):
    """The SDK's ``RunResultStreaming`` of a durable run, plus its ``run_id``.

    ``stream_events()`` yields the SDK's events of the drive in this process as they
    come; attributes (``current_agent``, ``current_turn``, ``new_items``, ...) follow the
    SDK's streamed result of that drive, ``cancel()`` cancels it. When the run had
    finished before (a re-sent ``run_id``, or another process drove its end), its
    events are those of a replay of its history: nothing executes again.
    """

    run_id: str
    handle: DurableRunHandle | None
    _perdure_sink: StreamSink
    _perdure_error: BaseException | None

    def __getattribute__(self, name: str) -> Any:
        # While the SDK's streamed result of the drive exists, its state is this
        # result's, live (``is_complete``, ``current_turn``, the lists the run loop
        # extends), as a caller polling the SDK's own streamed result sees it.
        if name.startswith("__") or name.startswith("_perdure") or name in _OWN_FIELDS:
            return object.__getattribute__(self, name)
        own = object.__getattribute__(self, "__dict__")
        sink = own.get("_perdure_sink")
        inner = None if sink is None else sink.inner
        if inner is not None and name in vars(inner):
            if name == "is_complete" and own.get("is_complete"):
                return True
            return vars(inner)[name]
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # ... and what a caller sets on it is set on that result too.
        object.__setattr__(self, name, value)
        if name.startswith("_perdure") or name in _OWN_FIELDS:
            return
        sink = vars(self).get("_perdure_sink")
        inner = None if sink is None else sink.inner
        if inner is not None and name in vars(inner):
            setattr(inner, name, value)

    def _follow(self) -> None:
        inner = self._perdure_sink.inner
        if inner is not None:
            own = {k: v for k, v in inner.__dict__.items() if k not in _OWN_FIELDS}
            vars(self).update(own)

    async def _drive(
        self, spec: dict[str, Any], local: Local, url: str | None, backend: Backend | None
    ) -> None:
        sink = self._perdure_sink
        try:
            self.handle = await _start(spec, local, self.run_id, url, backend)
            result = await self.handle.result()
            if isinstance(result, RunResultStreaming) and result is not sink.inner:
                sink.inner = result
        except BaseException as exc:
            self._perdure_error = exc
            raise  # awaiting run_loop_task raises it, as the SDK's does
        finally:
            self._follow()
            self.is_complete = True
            sink.close()

    async def stream_events(self) -> AsyncIterator[StreamEvent]:  # type: ignore[override]
        """The run's stream events; raises the run's error, if any, at the end."""
        sink = self._perdure_sink
        async for event in sink.events():
            self._follow()
            yield event
        await self._settled()
        self._follow()
        self.is_complete = True
        error = self._perdure_error
        if error is not None:
            raise error

    def cancel(self, mode: Literal["immediate", "after_turn"] = "immediate") -> None:  # type: ignore[override]
        sink = self._perdure_sink
        if sink.inner is not None:
            sink.inner.cancel(mode=mode)
        else:
            sink.cancel_mode = mode

    async def result(self) -> DurableResult:
        """Wait for the run to end (without consuming events) and return this result."""
        await self._settled()
        self._follow()
        self.is_complete = True
        error = self._perdure_error
        if error is not None:
            raise error
        return self  # type: ignore[return-value]

    async def _settled(self) -> None:
        """Wait for the drive; its error is raised by the caller, once."""
        task = self.run_loop_task
        if task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(task)

    @property
    def run_loop_exception(self) -> BaseException | None:  # type: ignore[override]
        """What the SDK's run loop of the drive raised (its ``run_loop_exception``),
        else what this result's drive raised; None until the drive has ended."""
        task = self.run_loop_task
        if task is None or not task.done() or task.cancelled():
            return None
        inner = self._perdure_sink.inner
        raised = None if inner is None else inner.run_loop_exception
        return raised if raised is not None else task.exception()

    @property
    def last_agent_name(self) -> str:
        return self.last_agent.name


def _streaming_result(
    agent: Agent[Any], input: Any, context: Any, max_turns: int | None, run_id: str
) -> DurableRunResultStreaming:
    counted: dict[str, Any] = {}
    if isinstance(input, RunState):
        fields = _compat.resumed_fields(input)
        counted["_current_turn_persisted_item_count"] = fields.pop(
            "_current_turn_persisted_item_count"
        )
    else:
        fields: dict[str, Any] = {
            "input": input if isinstance(input, str) else list(input),
            "new_items": [],
            "raw_responses": [],
            "current_turn": 0,
            "input_guardrail_results": [],
            "output_guardrail_results": [],
        }
    result = _compat.new_streaming_result(
        DurableRunResultStreaming,
        **fields,
        current_agent=agent,
        final_output=None,
        is_complete=False,
        max_turns=max_turns,
        tool_input_guardrail_results=[],
        tool_output_guardrail_results=[],
        context_wrapper=RunContextWrapper(context=context),
        trace=None,
    )
    assert isinstance(result, DurableRunResultStreaming)
    vars(result).update(counted)
    result.run_id = run_id
    result.handle = None
    result._perdure_error = None  # pyright: ignore[reportPrivateUsage]
    return result


class DurableRunner:
    """Drop-in durable ``agents.Runner``: each run is a perdure run named ``run_id``.

    ``run`` / ``run_sync`` / ``run_streamed`` take what ``Runner``'s do and return the
    SDK's own results (with ``run_id``); model calls, function-tool calls and session
    operations are recorded steps, so after a crash any ``perdure worker`` resumes the
    run where it stopped without calling a model twice. SDK exceptions are raised as
    themselves.

    Two approval styles: with ``run``, a tool with ``needs_approval`` ends the run with
    ``result.interruptions``, as with ``Runner`` — approve on ``result.to_state()`` and
    pass the state back (any process may, with ``RunState.to_json()``); use it when the
    caller holds the conversation. With ``start`` (or ``approvals="durable"``) the run
    waits durably instead, for minutes or months, until ``perdure approve RUN_ID`` (or
    ``handle.approve()``) from any process; use it when someone else decides later.

    Runs driven in this process use the objects given. A worker that resumes a run after
    a crash re-creates them: module-level agents, hooks, run configs and sessions are
    found by themselves; otherwise pass ``agent_ref="module:attribute"`` (an object or a
    factory), and likewise ``hooks_ref``, ``run_config_ref``, ``session_ref``,
    ``error_handlers_ref``; a context that holds live objects needs ``context_ref``
    (a factory). Without them the worker parks the run with a message naming what is
    missing.
    """

    @classmethod
    async def start(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | None = None,
        error_handlers: Any = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Session | None = None,
        run_id: str | None = None,
        url: str | None = None,
        backend: Backend | None = None,
        approvals: Approvals = "durable",
        model_retry: RetryPolicy | None = None,
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
        session_ref: str | None = None,
        context_ref: str | None = None,
        error_handlers_ref: str | None = None,
    ) -> DurableRunHandle:
        """Start a durable run and return its handle at once; this process drives it.

        Starting is idempotent: an existing ``run_id`` returns the existing run.
        Approvals wait durably unless ``approvals="sdk"``.
        """
        spec, local = _prepare(
            starting_agent,
            input,
            context=context,
            max_turns=max_turns,
            hooks=hooks,
            run_config=run_config,
            error_handlers=error_handlers,
            previous_response_id=previous_response_id,
            auto_previous_response_id=auto_previous_response_id,
            conversation_id=conversation_id,
            session=session,
            agent_ref=agent_ref,
            run_config_ref=run_config_ref,
            hooks_ref=hooks_ref,
            session_ref=session_ref,
            context_ref=context_ref,
            error_handlers_ref=error_handlers_ref,
            model_retry=model_retry,
            stream=False,
            approvals=approvals,
        )
        return await _start(spec, local, run_id, url, backend)

    @classmethod
    async def run(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | None = None,
        error_handlers: Any = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Session | None = None,
        run_id: str | None = None,
        url: str | None = None,
        backend: Backend | None = None,
        approvals: Approvals = "sdk",
        model_retry: RetryPolicy | None = None,
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
        session_ref: str | None = None,
        context_ref: str | None = None,
        error_handlers_ref: str | None = None,
    ) -> DurableResult:
        """``Runner.run``, durably: returns the SDK's ``RunResult`` (``result.run_id``)."""
        handle = await cls.start(
            starting_agent,
            input,
            context=context,
            max_turns=max_turns,
            hooks=hooks,
            run_config=run_config,
            error_handlers=error_handlers,
            previous_response_id=previous_response_id,
            auto_previous_response_id=auto_previous_response_id,
            conversation_id=conversation_id,
            session=session,
            run_id=run_id,
            url=url,
            backend=backend,
            approvals=approvals,
            model_retry=model_retry,
            agent_ref=agent_ref,
            run_config_ref=run_config_ref,
            hooks_ref=hooks_ref,
            session_ref=session_ref,
            context_ref=context_ref,
            error_handlers_ref=error_handlers_ref,
        )
        return await handle.result()

    @classmethod
    def run_sync(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        *,
        url: str | None = None,
        **kwargs: Any,
    ) -> DurableResult:
        """``run`` on a new event loop (not from inside a running loop); takes what
        ``run`` takes."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "DurableRunner.run_sync cannot be called when an event loop is already "
                "running; await DurableRunner.run instead"
            )

        async def main() -> DurableResult:
            backend = open_backend(resolve_url(url))
            await backend.open()
            try:
                return await cls.run(starting_agent, input, backend=backend, **kwargs)
            finally:
                await backend.close()

        return asyncio.run(main())

    @classmethod
    def run_streamed(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | None = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Session | None = None,
        *,
        error_handlers: Any = None,
        run_id: str | None = None,
        url: str | None = None,
        backend: Backend | None = None,
        approvals: Approvals = "sdk",
        model_retry: RetryPolicy | None = None,
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
        session_ref: str | None = None,
        context_ref: str | None = None,
        error_handlers_ref: str | None = None,
    ) -> DurableRunResultStreaming:
        """``Runner.run_streamed``, durably (call from a running event loop)."""
        spec, local = _prepare(
            starting_agent,
            input,
            context=context,
            max_turns=max_turns,
            hooks=hooks,
            run_config=run_config,
            error_handlers=error_handlers,
            previous_response_id=previous_response_id,
            auto_previous_response_id=auto_previous_response_id,
            conversation_id=conversation_id,
            session=session,
            agent_ref=agent_ref,
            run_config_ref=run_config_ref,
            hooks_ref=hooks_ref,
            session_ref=session_ref,
            context_ref=context_ref,
            error_handlers_ref=error_handlers_ref,
            model_retry=model_retry,
            stream=True,
            approvals=approvals,
        )
        _compat.validate_streamed_start(
            starting_agent,
            input,
            run_config,
            conversation_id=conversation_id,
            previous_response_id=previous_response_id,
            auto_previous_response_id=auto_previous_response_id,
        )
        sink = StreamSink()
        local.sink = sink
        rid = run_id or uuid.uuid4().hex
        result = _streaming_result(starting_agent, input, context, max_turns, rid)
        result._perdure_sink = sink  # pyright: ignore[reportPrivateUsage]
        sink.outer = result
        sink.shown = {name: len(vars(result).get(name) or []) for name in RESULT_LISTS}
        loop = asyncio.get_running_loop()
        result.run_loop_task = loop.create_task(
            result._drive(spec, local, url, backend),  # pyright: ignore[reportPrivateUsage]
            context=contextvars.Context(),
        )
        return result


__all__ = [
    "DurableResult",
    "DurableRunHandle",
    "DurableRunResult",
    "DurableRunResultStreaming",
    "DurableRunner",
    "RecordedRunResult",
]
