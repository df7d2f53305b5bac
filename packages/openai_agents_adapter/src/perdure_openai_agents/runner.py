"""``DurableRunner``: ``agents.Runner`` with durability — replace the name, keep the code."""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from agents import Agent, RunConfig, RunHooks
from agents.items import TResponseInputItem
from agents.memory.session import Session
from agents.result import RunResult, RunResultStreaming
from agents.run import DEFAULT_MAX_TURNS
from agents.run_state import RunState
from agents.stream_events import StreamEvent

import perdure
from perdure import Backend, ConfigurationError, RunHandle, RunInfo, RunStatus
from perdure.config import resolve_url
from perdure.errors import DeterminismError, NeedsAttentionError, SerializationError
from perdure.locate import locate, resolve
from perdure.records import Event
from perdure.registry import open_backend
from perdure.serialization import from_jsonable, to_jsonable
from perdure_openai_agents._workflow import LOCAL, Local, StreamSink, agent_run
from perdure_openai_agents.session import PerdureSession

T = TypeVar("T")


class DurableRunResult(RunResult):
    """The SDK's ``RunResult`` of a durable run, plus its ``run_id``."""

    run_id: str

    @classmethod
    def adopt(cls, result: RunResult, run_id: str) -> DurableRunResult:
        result.__class__ = cls
        adopted: DurableRunResult = result  # type: ignore[assignment]
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

    async def approve(self, *, by: str | None = None, message: str | None = None) -> None:
        """Approve the tool call the run waits for."""
        await self._handle.signal(perdure.APPROVAL, {"approved": True, "message": message}, by=by)

    async def reject(self, *, by: str | None = None, message: str | None = None) -> None:
        """Reject the tool call the run waits for; ``message`` is what the model sees."""
        await self._handle.signal(perdure.APPROVAL, {"approved": False, "message": message}, by=by)

    async def cancel(self) -> RunInfo:
        return await self._handle.cancel()

    async def result(self, *, timeout: float | None = None) -> DurableResult:
        """Wait for the run to end; raises as ``perdure.RunHandle.result`` does."""
        try:
            value = await _isolated(self._handle.result(timeout=timeout))
        except (NeedsAttentionError, DeterminismError, TimeoutError):
            raise  # the run may still finish here later: keep what this process holds
        except BaseException:
            LOCAL.pop(self.run_id, None)
            raise
        local = LOCAL.pop(self.run_id, None)
        live = None if local is None else local.result
        if isinstance(live, RunResult):
            return DurableRunResult.adopt(live, self.run_id)
        return recorded_result(self.run_id, value)


def recorded_result(run_id: str, value: Any) -> RecordedRunResult:
    data: dict[str, Any] = value if isinstance(value, dict) else {}
    final = data.get("final_output")
    if not data.get("final_output_as_text"):
        final = from_jsonable(final, f"final output of run {run_id!r}")
    return RecordedRunResult(run_id, final, str(data.get("last_agent", "")))


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
    stream: bool,
) -> tuple[dict[str, Any], Local]:
    if not isinstance(starting_agent, Agent):
        raise ConfigurationError(f"DurableRunner needs an Agent, not {type(starting_agent)!r}")
    if isinstance(input, RunState):
        raise ConfigurationError(
            "DurableRunner takes the run's original input, not a RunState: a durable run "
            "resumes by itself, and approvals are given with `perdure approve RUN_ID`"
        )
    if previous_response_id or auto_previous_response_id or conversation_id:
        raise ConfigurationError(
            "DurableRunner does not support server-managed conversation state "
            "(previous_response_id, auto_previous_response_id, conversation_id): a replay "
            "would send to the server again; keep history in a PerdureSession instead"
        )
    if error_handlers:
        raise ConfigurationError("DurableRunner does not support error_handlers yet")
    if agent_ref is not None:
        if not isinstance(resolve(agent_ref, what="agent"), Agent):
            raise ConfigurationError(f"agent_ref {agent_ref!r} does not name an Agent")
        agent_loc = agent_ref
    else:
        agent_loc = locate(starting_agent, what="agent", hint="agent_ref")
    config_loc = None
    if run_config is not None:
        config_loc = run_config_ref or locate(run_config, what="run config", hint="run_config_ref")
    hooks_loc = None
    if hooks is not None:
        hooks_loc = hooks_ref or locate(hooks, what="hooks", hint="hooks_ref")
    try:
        input_data = to_jsonable(input, "input")
    except SerializationError as exc:
        raise ConfigurationError(f"the input of a durable run must be JSON data: {exc}") from None
    try:
        context_data = to_jsonable(context, "context")
    except SerializationError as exc:
        raise ConfigurationError(
            "the context of a durable run must be JSON data, a dataclass or a pydantic model, "
            f"so a worker can rebuild it after a crash: {exc}"
        ) from None
    session_data: dict[str, Any] | None = None
    if session is not None:
        if not isinstance(session, PerdureSession):
            raise ConfigurationError(
                f"a durable run needs a PerdureSession, not {type(session).__name__}: other "
                "sessions would repeat their writes when the run is replayed after a crash"
            )
        settings = session.session_settings
        session_data = {
            "session_id": session.session_id,
            "url": session.url,
            "limit": None if settings is None else settings.limit,
        }
    spec = {
        "agent": agent_loc,
        "input": input_data,
        "max_turns": max_turns,
        "context": context_data,
        "run_config": config_loc,
        "hooks": hooks_loc,
        "session": session_data,
        "stream": stream,
    }
    local = Local(
        agent=starting_agent,
        context=context,
        has_context=context is not None,
        hooks=hooks,
        run_config=run_config,
        session=session,
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


class DurableRunResultStreaming:
    """A streamed durable run: ``stream_events()`` yields the SDK's events live.

    After a resume in this process (a new consumer calling ``run_streamed`` with the
    same ``run_id``), the recorded part of the run arrives first in condensed form — one
    raw ``response.completed`` per recorded model call plus the run-item events — then
    live events. If another process drives the run, no events arrive and the stream ends
    when the run does; ``final_output`` is then the recorded one.
    """

    def __init__(self, run_id: str, sink: StreamSink) -> None:
        self.run_id = run_id
        self._sink = sink
        self._task: asyncio.Task[None] | None = None
        self._result: DurableResult | None = None
        self._live: RunResultStreaming | None = None
        self._error: BaseException | None = None
        self.handle: DurableRunHandle | None = None

    async def _run(
        self, spec: dict[str, Any], local: Local, url: str | None, backend: Backend | None
    ) -> None:
        try:
            self.handle = await _start(spec, local, self.run_id, url, backend)
            self._result = await self.handle.result()
            if isinstance(local.result, RunResultStreaming):
                self._live = local.result
        except BaseException as exc:
            self._error = exc
        finally:
            self._sink.close()

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """The run's stream events; raises the run's error, if any, at the end."""
        async for event in self._sink.events():
            yield event
        if self._task is not None:
            await self._task
        if self._error is not None:
            raise self._error

    async def result(self) -> DurableResult:
        """Wait for the run to end and return its result."""
        if self._task is not None:
            await self._task
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    @property
    def is_complete(self) -> bool:
        return self._task is not None and self._task.done()

    @property
    def final_output(self) -> Any:
        return None if self._result is None else self._result.final_output

    @property
    def last_agent_name(self) -> str | None:
        return None if self._result is None else self._result.last_agent_name

    def __getattr__(self, name: str) -> Any:
        """Once complete, other attributes (``new_items``, ``raw_responses``, ...) are those
        of the SDK's streamed result of the last drive in this process, if there was one."""
        live = self.__dict__.get("_live")
        if live is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(live, name)


class DurableRunner:
    """Drop-in durable ``agents.Runner``: each run is a perdure run named ``run_id``.

    Model calls and tool calls are recorded steps; after a crash any ``perdure worker``
    that imports the agent's module resumes the run where it stopped, without calling a
    model twice. Tools with ``needs_approval`` suspend the run durably until
    ``perdure approve RUN_ID`` / ``reject``. The agent (and ``run_config``, ``hooks``)
    must be module-level objects, or be named with ``agent_ref="module:attr"``.
    """

    @classmethod
    async def start(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
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
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
    ) -> DurableRunHandle:
        """Start a durable run and return its handle at once; this process drives it.

        Starting is idempotent: an existing ``run_id`` returns the existing run.
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
            stream=False,
        )
        return await _start(spec, local, run_id, url, backend)

    @classmethod
    async def run(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
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
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
    ) -> DurableResult:
        """Run durably and wait for the end (through any approvals); ``result.run_id``."""
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
            agent_ref=agent_ref,
            run_config_ref=run_config_ref,
            hooks_ref=hooks_ref,
        )
        return await handle.result()

    @classmethod
    def run_sync(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
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
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
    ) -> DurableResult:
        """``run`` on a new event loop (not from inside a running loop)."""

        async def main() -> DurableResult:
            backend = open_backend(resolve_url(url))
            await backend.open()
            try:
                return await cls.run(
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
                    backend=backend,
                    agent_ref=agent_ref,
                    run_config_ref=run_config_ref,
                    hooks_ref=hooks_ref,
                )
            finally:
                await backend.close()

        return asyncio.run(main())

    @classmethod
    def run_streamed(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
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
        agent_ref: str | None = None,
        run_config_ref: str | None = None,
        hooks_ref: str | None = None,
    ) -> DurableRunResultStreaming:
        """Start a durable run in streaming mode (call from a running event loop).

        Model and tool calls are recorded while events stream; see
        ``DurableRunResultStreaming`` for what a consumer sees after a resume.
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
            stream=True,
        )
        sink = StreamSink()
        local.sink = sink
        result = DurableRunResultStreaming(run_id or uuid.uuid4().hex, sink)
        loop = asyncio.get_running_loop()
        result._task = loop.create_task(  # pyright: ignore[reportPrivateUsage]
            result._run(spec, local, url, backend),  # pyright: ignore[reportPrivateUsage]
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
