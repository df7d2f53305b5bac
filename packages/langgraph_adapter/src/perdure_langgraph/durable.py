"""``durable(compiled_graph)``: every LangGraph thread is a conversation of durable turns.

* **A thread is a sequence of turns.** Each ``invoke``/``ainvoke``/``stream``/``astream``
  that brings new input (or continues a thread whose last turn finished, e.g. after
  ``update_state`` or from an earlier ``checkpoint_id``) starts turn ``n`` of the thread:
  the perdure run ``f"{thread_id}#{n}"`` of the workflow ``langgraph.thread``. It continues
  from the thread's last checkpoint exactly as LangGraph does with a checkpointer. A call
  whose input equals the last turn's (a retried request after a crash) attaches to that
  turn instead of starting another; ``configurable["perdure_turn"] = n`` names a turn
  explicitly. The thread's turn index is in the store: every checkpoint a turn writes
  carries ``perdure_turn`` in its metadata, and turn runs are looked up by id.
* **Recovery**: a turn's input names the graph by locator (``"module:attribute"``, or a
  factory), so ``perdure worker MODULE`` re-creates it after the process died; the turn
  continues from its last checkpoint. Graph values (inputs, context, resume values) are
  stored with the checkpointer's own serializer, so they come back as the same objects
  (LangChain messages, pydantic models, dataclasses, ...), never as JSON dicts.
* **Checkpoints** are committed before the next superstep starts (``durability="sync"``)
  so task ids, hence journal keys, never change under a crash.
* **Durable side effects in nodes**: every task of a durable drive (nodes, ``Send``
  targets, subgraph nodes, functional ``@task`` calls) runs inside
  ``perdure.keyed(f"{run_id}/{task_checkpoint_ns}")``; LangGraph derives the task id in
  that namespace from the checkpoint id, the step and the node, so a node re-run after a
  crash, a retry or ``interrupt()`` meets its recorded ``@perdure.effect`` results.
* **Interrupts and breakpoints are suspensions**: pending ``interrupt(value)`` calls, and
  static breakpoints (``interrupt_before``/``interrupt_after``, at compile or call time),
  make the turn wait for the signal ``approval`` (``durable(..., signal=...)`` changes the
  name; an interrupt whose value is a dict with a str ``"signal"`` key names its own).
  ``perdure approve``/``reject``/``signal``, ``Command(resume=...)`` or (at a breakpoint)
  ``invoke(None, cfg)`` answer it; a rejected breakpoint ends the turn before the node.
  An answer from ``invoke`` is an operator's answer like the others: the ``Authorizer``
  in force decides, with the identity in ``configurable["perdure_by"]`` (or
  ``PERDURE_ACTOR``) or the signed token in ``configurable["perdure_token"]`` (or
  ``PERDURE_TOKEN``); neither is stored.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import contextvars
import hashlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt, StateSnapshot

import perdure
from perdure import (
    Backend,
    ConfigurationError,
    DeterminismError,
    InvalidRunStateError,
    RunInfo,
    RunNotFoundError,
    RunStatus,
)
from perdure.spi import (
    current_run,
    find_locator,
    open_backend,
    outcome,
    report_determinism,
    resolve_locator,
    resolve_url,
)
from perdure_langgraph._compat import install_task_wrapper, schema_types
from perdure_langgraph._jsonable import to_jsonable as lossy_jsonable
from perdure_langgraph.saver import PerdureSaver, configurable

__all__ = ["TURN_KEY", "WORKFLOW_NAME", "DurableGraph", "durable", "turn_run_id"]

WORKFLOW_NAME = "langgraph.thread"
#: Checkpoint metadata (and ``configurable``) key holding the turn number.
TURN_KEY = "perdure_turn"
#: ``configurable`` keys naming who answers (``by``) or the token they present.
BY_KEY = "perdure_by"
TOKEN_KEY = "perdure_token"
#: Marks the configs of a durable drive (value: the turn's run id); LangGraph passes it
#: down to every task.
_MARK = "__perdure_thread__"
#: How often a caller looks whether its turn stopped at an interrupt.
_POLL = 0.05
#: LangGraph's channel that triggers node X is ``branch:to:X``.
_TRIGGER = "branch:to:"
_INTERRUPT = "__interrupt__"
#: Marks a value encoded with the checkpointer's serializer inside JSON.
_ENCODED = "__perdure_langgraph__"
#: invoke/stream keyword arguments that change what runs (kept in the turn for a worker).
_RUN_OPTIONS = ("interrupt_before", "interrupt_after", "context")
#: keyword arguments that only shape what this caller receives.
_OUTPUT_OPTIONS = ("stream_mode", "subgraphs", "version", "output_keys", "print_mode")
_DURABILITY = (None, "sync", "async", "exit")
_T = TypeVar("_T")


def turn_run_id(thread_id: str, turn: int) -> str:
    """The perdure run id of turn ``turn`` (1, 2, ...) of a thread."""
    return f"{thread_id}#{turn}"


# -- keyed tasks ---------------------------------------------------------------------------


class _KeyedProc(Runnable[Any, Any]):
    """A task's runnable, run inside ``perdure.keyed(key)`` (each attempt from position 1)."""

    def __init__(self, proc: Runnable[Any, Any], key: str) -> None:
        self.proc = proc
        self.key = key

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.proc.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        with perdure.keyed(self.key):
            return await self.proc.ainvoke(input, config, **kwargs)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        with perdure.keyed(self.key):
            async for chunk in self.proc.astream(input, config, **kwargs):
                yield chunk


def task_key(run_id: str, task_checkpoint_ns: str) -> str:
    """The journal key of a task's steps: ``run/parent_ns|node:task_id``."""
    return f"{run_id}/{task_checkpoint_ns}"


def _key_task(task: Any, proc: Any) -> Any | None:
    conf = task.config.get("configurable") or {}
    run_id = conf.get(_MARK)
    if run_id is None or current_run.get() is None:
        return None
    ns = str(conf.get("checkpoint_ns") or f"{task.name}:{task.id}")
    return _KeyedProc(proc, task_key(run_id, ns))


install_task_wrapper(_key_task)


# -- what the process that started a turn holds ---------------------------------------------


_END = object()


@dataclass
class _Local:
    graph: DurableGraph
    output: Any = None
    has_output: bool = False
    options: dict[str, Any] = field(default_factory=lambda: {})
    queue: asyncio.Queue[Any] | None = None


_LOCAL: dict[str, _Local] = {}
#: Durable wrappers a worker made for graphs located as plain compiled graphs.
_WRAPPED: dict[str, DurableGraph] = {}


# -- the graph wrapper -----------------------------------------------------------------------


class DurableGraph:
    """A compiled LangGraph graph whose threads are conversations of durable turns.

    ``invoke``/``ainvoke``/``stream``/``astream`` start the thread's next turn (or attach
    to the one the same input already started) and return what LangGraph returns when
    the turn ends or stops at an interrupt or breakpoint (with ``__interrupt__`` as
    LangGraph's output has). ``Command(resume=v)`` answers the turn waiting for it.
    Anything else (``get_state``, ``update_state``, ``get_state_history``, ...) is the
    compiled graph's, on its durable checkpointer.
    """

    def __init__(
        self,
        compiled: Pregel | Callable[[], Pregel],
        *,
        url: str | None = None,
        graph_ref: str | None = None,
        signal: str = perdure.APPROVAL,
    ) -> None:
        if not isinstance(compiled, Pregel):
            raise ConfigurationError(
                f"durable() needs a compiled LangGraph graph, not {type(compiled).__name__}"
            )
        checkpointer = compiled.checkpointer
        if isinstance(checkpointer, InMemorySaver):
            raise ConfigurationError(
                "durable() cannot recover threads kept in an InMemorySaver; compile without "
                "a checkpointer (durable() adds a PerdureSaver) or with a PerdureSaver"
            )
        if checkpointer is not None and not isinstance(checkpointer, BaseCheckpointSaver):
            raise ConfigurationError(
                f"durable() needs the graph's own checkpointer, not checkpointer={checkpointer!r}"
            )
        self.compiled = compiled
        self.url = url
        self.graph_ref = graph_ref
        self.signal = signal
        self._types = schema_types(compiled)
        if isinstance(checkpointer, PerdureSaver):
            checkpointer.allow_types(self._types)
            checkpointer.require_portable_types()
        self._graphs: dict[str, Pregel] = {}
        self._lock = threading.Lock()
        self._ref: str | None = None

    def __repr__(self) -> str:
        return f"<DurableGraph {self.compiled.name!r}>"

    # -- the graph with its checkpointer ---------------------------------------------------

    def graph_for(self, url: str | None = None) -> Pregel:
        """The compiled graph with a durable checkpointer (a ``PerdureSaver`` on ``url``,
        else this wrapper's URL, else perdure's configured one) unless it has its own."""
        if self.compiled.checkpointer is not None:
            return self.compiled
        resolved = resolve_url(url or self.url)
        with self._lock:
            graph = self._graphs.get(resolved)
            if graph is None:
                saver = PerdureSaver.from_url(resolved, allowed_types=self._types)
                saver.require_portable_types()
                graph = self.compiled.copy(update={"checkpointer": saver})
                self._graphs[resolved] = graph
        return graph

    @property
    def graph(self) -> Pregel:
        """The compiled graph with its durable checkpointer (on this wrapper's URL)."""
        return self.graph_for()

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any]:
        saver = self.graph.checkpointer
        assert isinstance(saver, BaseCheckpointSaver)
        return saver

    def close(self) -> None:
        """Close the checkpointers this wrapper opened."""
        with self._lock:
            graphs = list(self._graphs.values())
            self._graphs.clear()
        for graph in graphs:
            if isinstance(graph.checkpointer, PerdureSaver):
                graph.checkpointer.close()

    async def aclose(self) -> None:
        """Close the checkpointers this wrapper opened, with this event loop's pools."""
        with self._lock:
            graphs = list(self._graphs.values())
            self._graphs.clear()
        for graph in graphs:
            if isinstance(graph.checkpointer, PerdureSaver):
                await graph.checkpointer.aclose()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("compiled", "_graphs", "_lock", "_types"):
            raise AttributeError(name)
        return getattr(self.graph, name)

    def locator(self) -> str:
        """Where a worker finds this graph: ``graph_ref`` or a module-level attribute."""
        if self.graph_ref is not None:
            _located(self.graph_ref, given=True)  # the user's code named it: allowed
            return self.graph_ref
        if self._ref is None:
            self._ref = find_locator(self, self.compiled)
        if self._ref is None:
            raise ConfigurationError(
                f"cannot find_locator graph {self.compiled.name!r} (or its durable() wrapper) as a "
                "module-level attribute of an imported module, so a worker could not "
                "re-create it after a crash; define it at module level, or pass "
                "durable(..., graph_ref='module:attribute') naming it or a function that "
                "builds it"
            )
        return self._ref

    # -- state (delegated, on the durable checkpointer) -------------------------------------

    def get_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        """The thread's current state (see ``Pregel.get_state``)."""
        return self.graph.get_state(config, subgraphs=subgraphs)

    async def aget_state(self, config: RunnableConfig, *, subgraphs: bool = False) -> StateSnapshot:
        """The thread's current state (see ``Pregel.aget_state``)."""
        return await self.graph.aget_state(config, subgraphs=subgraphs)

    def get_state_history(self, config: RunnableConfig, **kwargs: Any) -> Iterator[StateSnapshot]:
        """The thread's checkpoints, newest first (see ``Pregel.get_state_history``)."""
        return self.graph.get_state_history(config, **kwargs)

    # -- running ------------------------------------------------------------------------------

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the thread's turn durably until it ends or waits; LangGraph's output."""
        return await self._run(input, config, kwargs, queue=None)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """``ainvoke`` on an event loop of its own (in a thread when one is running here)."""
        return _run_sync(self.url, lambda: self.ainvoke(input, config, **kwargs))

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Stream the chunks of the drives made by this process (``stream_mode``,
        ``subgraphs``, ``version`` as in LangGraph) until the turn ends or waits."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        task = asyncio.get_running_loop().create_task(self._run(input, config, kwargs, queue=queue))
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    chunk = getter.result()
                    if chunk is _END:
                        break
                    yield chunk
                    continue
                getter.cancel()
                while not queue.empty():
                    chunk = queue.get_nowait()
                    if chunk is not _END:
                        yield chunk
                break
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """``astream`` collected on an event loop of its own, then yielded."""

        async def collect() -> list[Any]:
            return [chunk async for chunk in self.astream(input, config, **kwargs)]

        yield from _run_sync(self.url, collect)

    async def _run(
        self,
        input: Any,
        config: RunnableConfig | None,
        kwargs: dict[str, Any],
        *,
        queue: asyncio.Queue[Any] | None,
    ) -> Any:
        call = _Call.parse(config, kwargs)
        backend = _OWN_BACKEND.get() or await _isolated(perdure.connect(self.url))
        graph = self.graph_for(backend.url)
        serde = _serde_of(graph)
        local = _Local(self, options=call.output_options, queue=queue)
        try:
            run_id = await self._choose(backend, graph, serde, call, input, local)
            if run_id is None:  # nothing to run: LangGraph returns the current state
                snap = await graph.aget_state(_thread_config(call.thread_id))
                return _output(graph, snap, None)
            return await self._finish(backend, graph, run_id, local)
        finally:
            if queue is not None:
                queue.put_nowait(_END)

    async def _choose(
        self,
        backend: Backend,
        graph: Pregel,
        serde: SerializerProtocol,
        call: _Call,
        input: Any,
        local: _Local,
    ) -> str | None:
        """Start or pick the turn this call is about; its run id (``None``: none)."""
        thread = call.thread_id
        last, info = await _last_turn(backend, graph, thread)
        resume = isinstance(input, Command) and input.resume is not None
        if resume and (input.goto or input.update is not None):
            raise ConfigurationError(
                "Command(resume=...) answers a waiting turn; send goto/update as a separate "
                "Command (a new turn) or use update_state"
            )
        if call.turn is not None:
            if call.turn < 1 or call.turn > last + 1:
                raise ConfigurationError(
                    f"thread {thread!r} has {last} turn(s); perdure_turn={call.turn} names "
                    "neither one of them nor the next"
                )
            if call.turn <= last:
                if resume:
                    await self._answer(backend, serde, turn_run_id(thread, call.turn), input, call)
                return turn_run_id(thread, call.turn)
        if resume:
            if info is None:
                raise InvalidRunStateError(
                    f"thread {thread!r} has no turn waiting for an answer; "
                    "Command(resume=...) has nothing to resume"
                )
            await self._answer(backend, serde, info.run_id, input, call)
            return info.run_id
        moving = info is not None and not info.status.terminal
        if input is None and call.checkpoint_id is None:
            if info is not None and moving:
                if _at_breakpoint(info):  # LangGraph continues past a breakpoint
                    await backend.signal(
                        info.run_id,
                        info.waiting_for or self.signal,
                        None,
                        by=call.by,
                        token=call.token,
                    )
                return info.run_id
            snap = await graph.aget_state(_thread_config(thread))
            if not snap.next:
                return None
        encoded = _encode(serde, input, "the graph input")
        digest = _digest(encoded, call)
        if info is not None and info.input and _spec_of(info).get("digest") == digest:
            return info.run_id  # the same call again: attach to the turn it started
        if info is not None and moving:
            raise InvalidRunStateError(_busy(info))
        turn = last + 1
        run_id = turn_run_id(thread, turn)
        spec = {
            "graph": self.locator(),
            "thread_id": thread,
            "turn": turn,
            "input": encoded,
            "digest": digest,
            "config": call.spec_config,
            "options": {k: _encode(serde, v, k) for k, v in call.run_options.items()},
        }
        _LOCAL[run_id] = local
        try:
            await _isolated(backend.start(thread_run, (spec,), {}, run_id=run_id))
        except BaseException:
            _LOCAL.pop(run_id, None)
            raise
        started = await backend.get_run(run_id)
        if _spec_of(started).get("digest") != digest:
            _LOCAL.pop(run_id, None)
            raise InvalidRunStateError(
                f"turn {turn} of thread {thread!r} was just started by another caller with "
                "other input; invoke again once it has finished"
            )
        return run_id

    async def _answer(
        self,
        backend: Backend,
        serde: SerializerProtocol,
        run_id: str,
        command: Command[Any],
        call: _Call,
    ) -> None:
        info = await backend.get_run(run_id)
        if info.status is not RunStatus.SUSPENDED or info.waiting_for is None:
            raise InvalidRunStateError(
                f"turn {run_id!r} is {info.status.value} and waits for no interrupt answer; "
                "Command(resume=...) has nothing to resume"
            )
        payload = _encode_payload(serde, command.resume)
        await backend.signal(run_id, info.waiting_for, payload, by=call.by, token=call.token)

    async def _finish(self, backend: Backend, graph: Pregel, run_id: str, local: _Local) -> Any:
        _LOCAL.setdefault(run_id, local)
        try:
            info = await _isolated(_wait_stop(backend, run_id))
        finally:
            if _LOCAL.get(run_id) is local:
                del _LOCAL[run_id]
        if info.status not in (RunStatus.SUSPENDED, RunStatus.SUCCEEDED):
            return outcome(info)  # raises the typed error of the turn's end
        if local.has_output:
            return local.output
        spec = _spec_of(info)
        thread = str(spec.get("thread_id") or run_id)
        if info.status is RunStatus.SUSPENDED:
            snap = await graph.aget_state(_thread_config(thread))
            return _output(graph, snap, info)
        config = await _turn_checkpoint(graph, thread, spec.get("turn"))
        snap = await graph.aget_state(config)
        return _output(graph, snap, info)


def durable(
    compiled_graph: Pregel,
    *,
    url: str | None = None,
    graph_ref: str | None = None,
    signal: str = perdure.APPROVAL,
) -> DurableGraph:
    """Make a compiled graph durable: each thread a conversation of perdure runs (turns),
    each resumable by a worker.

    ``url`` names the perdure store (default: ``PERDURE_URL``, pyproject, SQLite file);
    the graph gets a ``PerdureSaver`` there unless it was compiled with a checkpointer.
    ``graph_ref`` (``"module:attribute"``) says where a worker finds the graph (or a
    function without arguments that builds it) when it is not a module-level attribute;
    ``signal`` is what interrupts and breakpoints wait for.
    """
    return DurableGraph(compiled_graph, url=url, graph_ref=graph_ref, signal=signal)


# -- one call -----------------------------------------------------------------------------------


@dataclass
class _Call:
    thread_id: str
    turn: int | None
    checkpoint_id: str | None
    spec_config: dict[str, Any]
    run_options: dict[str, Any]
    output_options: dict[str, Any]
    #: Who answers an interrupt or a breakpoint through this call (never stored).
    by: str | None = None
    token: str | None = None

    @classmethod
    def parse(cls, config: RunnableConfig | None, kwargs: dict[str, Any]) -> _Call:
        unknown = set(kwargs) - {"durability", *_RUN_OPTIONS, *_OUTPUT_OPTIONS}
        if unknown:
            raise ConfigurationError(
                f"durable graphs do not take {sorted(unknown)} on invoke/stream"
            )
        if kwargs.get("durability") not in _DURABILITY:
            raise ConfigurationError(
                f"durability={kwargs['durability']!r} is not one of 'sync', 'async', 'exit'"
            )
        conf = dict((config or {}).get("configurable") or {})
        thread_id = conf.pop("thread_id", None)
        if not thread_id:
            raise ConfigurationError(
                "a durable graph needs config={'configurable': {'thread_id': ...}}: the "
                "thread's turns are perdure runs named after it"
            )
        turn = conf.pop(TURN_KEY, None)
        if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool)):
            raise ConfigurationError(f"configurable[{TURN_KEY!r}] must be an int, not {turn!r}")
        conf.pop("checkpoint_ns", None)
        by, token = conf.pop(BY_KEY, None), conf.pop(TOKEN_KEY, None)
        checkpoint_id = conf.get("checkpoint_id")
        kept = {k: v for k, v in conf.items() if not k.startswith("__")}
        spec: dict[str, Any] = {"configurable": kept}
        for key in ("recursion_limit", "tags", "metadata", "run_name"):
            if config is not None and config.get(key) is not None:
                spec[key] = config.get(key)
        try:
            _json_only(spec)
        except TypeError as exc:
            raise ConfigurationError(
                f"the config of a durable graph must be JSON data so a worker can rebuild it: {exc}"
            ) from None
        run_options = {k: kwargs[k] for k in _RUN_OPTIONS if kwargs.get(k) is not None}
        output_options = {k: kwargs[k] for k in _OUTPUT_OPTIONS if k in kwargs}
        return cls(
            str(thread_id),
            turn,
            None if checkpoint_id is None else str(checkpoint_id),
            spec,
            run_options,
            output_options,
            None if by is None else str(by),
            None if token is None else str(token),
        )


def _json_only(value: Any, where: str = "config") -> None:
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            _json_only(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():  # pyright: ignore[reportUnknownVariableType]
            if not isinstance(k, str):
                raise TypeError(f"{where} has a non-str key {k!r}")
            _json_only(v, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where} is a {type(value).__name__}")


# -- helpers -----------------------------------------------------------------------------------


#: The backend of a sync call run in a thread of its own (see ``_run_sync``).
_OWN_BACKEND: contextvars.ContextVar[Backend | None] = contextvars.ContextVar(
    "perdure_langgraph_own_backend", default=None
)


def _run_sync(url: str | None, make: Callable[[], Awaitable[_T]]) -> _T:
    async def main() -> _T:
        try:
            return await make()
        finally:
            await perdure.shutdown()

    async def in_thread() -> _T:
        # Its own backend, closed at the end: the loop running in the caller's thread
        # keeps the backends it opened.
        backend = open_backend(resolve_url(url))
        await backend.open()
        token = _OWN_BACKEND.set(backend)
        try:
            return await make()
        finally:
            _OWN_BACKEND.reset(token)
            await backend.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    # A loop runs here (a notebook, an async framework): run ours in a thread.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="perdure-invoke") as pool:
        return pool.submit(asyncio.run, in_thread()).result()


async def _isolated(awaitable: Awaitable[_T]) -> _T:
    """Await in a fresh context: a turn started from inside another run's step must
    not inherit that run's step position or key."""

    async def go() -> _T:
        return await awaitable

    return await asyncio.get_running_loop().create_task(go(), context=contextvars.Context())


async def _wait_stop(backend: Backend, run_id: str) -> RunInfo:
    """Drive the run here whenever it is due; return once it ended, parked, or waits for
    a signal."""
    while True:
        try:
            return await backend.wait(run_id, timeout=_POLL)
        except TimeoutError:
            pass
        info = await backend.get_run(run_id)
        due = info.wake_at is not None and info.wake_at <= time.time()
        if info.status is RunStatus.SUSPENDED and info.waiting_for is not None and not due:
            return info  # waits for an answer no one gave yet


def _located(ref: str, *, given: bool = False) -> Pregel | DurableGraph:
    """The graph ``ref`` names, calling it first when it names a factory; ``given``: the
    user's code passed ``ref`` (not stored data), so its module may be imported."""
    found = resolve_locator(ref, what="graph", given=given)
    if not isinstance(found, DurableGraph | Pregel) and callable(found):
        found = found()
    if not isinstance(found, DurableGraph | Pregel):
        raise ConfigurationError(
            f"graph_ref {ref!r} names a {type(found).__name__}, not a graph (or a function "
            "without arguments that returns one)"
        )
    return found


def _serde_of(graph: Pregel) -> SerializerProtocol:
    saver = graph.checkpointer
    assert isinstance(saver, BaseCheckpointSaver)
    return saver.serde


def _encode(serde: SerializerProtocol, value: Any, where: str) -> dict[str, str]:
    """``value`` as JSON, through the checkpointer's serializer (same types come back)."""
    try:
        type_, data = serde.dumps_typed(value)
    except Exception as exc:
        raise ConfigurationError(f"{where} cannot be checkpointed: {exc}") from exc
    return {"type": type_, "data": base64.b64encode(data).decode("ascii")}


def _decode(serde: SerializerProtocol, encoded: Any) -> Any:
    return serde.loads_typed((encoded["type"], base64.b64decode(encoded["data"])))


def _encode_payload(serde: SerializerProtocol, value: Any) -> Any:
    """A resume value as a signal payload: JSON data as is (what ``perdure approve``
    sends too), anything else through the checkpointer's serializer."""
    try:
        _json_only(value, "resume")
    except TypeError:
        return {_ENCODED: _encode(serde, value, "the resume value")}
    return value


def _decode_payload(serde: SerializerProtocol, payload: Any) -> Any:
    if isinstance(payload, dict) and set(payload) == {_ENCODED}:  # pyright: ignore[reportUnknownArgumentType]
        return _decode(serde, payload[_ENCODED])
    return payload


def _digest(encoded: dict[str, str], call: _Call) -> str:
    what = repr((encoded, call.checkpoint_id, sorted(call.run_options.items(), key=str)))
    return hashlib.sha256(what.encode()).hexdigest()


def _spec_of(info: RunInfo) -> dict[str, Any]:
    args = info.input.get("args") if isinstance(info.input, dict) else None
    spec = args[0] if isinstance(args, list) and args else info.input
    return spec if isinstance(spec, dict) else {}  # pyright: ignore[reportUnknownVariableType]


def _busy(info: RunInfo) -> str:
    if info.status is RunStatus.SUSPENDED:
        return (
            f"turn {info.run_id!r} waits for an answer ({info.waiting_for!r}): resume it "
            "with Command(resume=...) or perdure approve/reject, or cancel it "
            f"(perdure cancel {info.run_id}) before sending new input"
        )
    if info.status is RunStatus.NEEDS_ATTENTION:
        return (
            f"turn {info.run_id!r} needs attention ({(info.attention or {}).get('reason')}): "
            "reconcile or resume it (perdure runs show / reconcile) before sending new input"
        )
    return (
        f"turn {info.run_id!r} is still {info.status.value}; wait for it (invoke(None, cfg) "
        "attaches to it) before sending new input"
    )


def _at_breakpoint(info: RunInfo) -> bool:
    return info.status is RunStatus.SUSPENDED and (info.attention or {}).get("kind") == (
        "langgraph_breakpoint"
    )


async def _last_turn(backend: Backend, graph: Pregel, thread: str) -> tuple[int, RunInfo | None]:
    """The number of the thread's last turn (0: none) and its run."""
    saver = graph.checkpointer
    assert isinstance(saver, BaseCheckpointSaver)
    latest = await saver.aget_tuple(_thread_config(thread))
    turn = 0
    if latest is not None:
        marked = (latest.metadata or {}).get(TURN_KEY)
        turn = marked if isinstance(marked, int) else 0
    info: RunInfo | None = None
    if turn:
        with contextlib.suppress(RunNotFoundError):
            info = await backend.get_run(turn_run_id(thread, turn))
    while True:  # turns started after the last checkpoint was written
        try:
            info = await backend.get_run(turn_run_id(thread, turn + 1))
        except RunNotFoundError:
            return turn, info
        turn += 1


async def _turn_checkpoint(graph: Pregel, thread: str, turn: Any) -> RunnableConfig:
    """The config of the last root checkpoint turn ``turn`` wrote (else the latest)."""
    saver = graph.checkpointer
    assert isinstance(saver, BaseCheckpointSaver)
    if isinstance(turn, int):
        root = _thread_config(thread)
        configurable(root)["checkpoint_ns"] = ""
        async for tup in saver.alist(root, filter={TURN_KEY: turn}, limit=1):
            return tup.config
    return _thread_config(thread)


def _thread_config(
    thread_id: str,
    spec: dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    turn: int | None = None,
) -> RunnableConfig:
    """The LangGraph config of a thread; ``run_id`` flags it as a durable drive's."""
    spec = spec or {}
    conf = {**(spec.get("configurable") or {}), "thread_id": thread_id}
    conf.pop("checkpoint_id", None)
    config: dict[str, Any] = {k: v for k, v in spec.items() if k != "configurable"}
    if run_id is not None:
        conf[_MARK] = run_id
    if turn is not None:
        config["metadata"] = {**(config.get("metadata") or {}), TURN_KEY: turn}
    config["configurable"] = conf
    return config  # type: ignore[return-value]


def _output(graph: Pregel, snap: StateSnapshot, info: RunInfo | None) -> Any:
    """What LangGraph's invoke returns for this state: the output channels, and the
    pending interrupts under ``__interrupt__``."""
    values = snap.values
    channels = graph.output_channels
    if isinstance(values, dict) and not isinstance(channels, str):
        out: Any = {k: v for k, v in values.items() if k in channels}  # pyright: ignore[reportUnknownVariableType]
    elif (
        isinstance(values, dict)
        and isinstance(channels, str)
        and (not isinstance(graph.stream_channels_asis, str))
    ):
        out = values.get(channels)  # pyright: ignore[reportUnknownMemberType]
    else:
        out = values
    if snap.interrupts:
        base = out if isinstance(out, dict) else {}
        out = {**base, _INTERRUPT: list(snap.interrupts)}  # pyright: ignore[reportUnknownArgumentType]
    return out


# -- the workflow ------------------------------------------------------------------------------


def _round_key(run_id: str, interrupts: Sequence[Interrupt]) -> str:
    ids = sorted(i.id for i in interrupts)
    tag = "+".join(ids) if len(ids) <= 2 else hashlib.sha256("+".join(ids).encode()).hexdigest()
    return f"{run_id}/interrupt/{tag}"


def _signal_name(graph: DurableGraph, interrupts: Sequence[Interrupt]) -> str:
    names = {
        i.value["signal"]
        for i in interrupts
        if isinstance(i.value, dict) and isinstance(i.value.get("signal"), str)
    }
    return names.pop() if len(names) == 1 else graph.signal


def _details(
    thread_id: str, turn: Any, name: str, interrupts: Sequence[Interrupt]
) -> dict[str, Any]:
    shown = [{"id": i.id, "value": lossy_jsonable(i.value)} for i in interrupts]
    details: dict[str, Any] = {}
    if len(shown) == 1 and isinstance(shown[0]["value"], dict):
        details.update(shown[0]["value"])
    details.update(
        kind="langgraph_interrupt", thread_id=thread_id, turn=turn, signal=name, interrupts=shown
    )
    return details


def _resume(payload: Any, interrupts: Sequence[Interrupt]) -> Command[Any]:
    ids = {i.id for i in interrupts}
    if isinstance(payload, dict) and payload and set(payload) <= ids:  # pyright: ignore[reportUnknownArgumentType]
        return Command(resume=dict(payload))  # pyright: ignore[reportUnknownArgumentType]
    if len(interrupts) == 1:
        return Command(resume=payload)
    return Command(resume=dict.fromkeys(sorted(ids), payload))


def _rejected(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("approved") is False  # pyright: ignore[reportUnknownMemberType]


def _breakpoint_pending(
    tup: CheckpointTuple,
    parent: CheckpointTuple | None,
    before: Any,
    after: Any,
    nxt: Sequence[str],
) -> bool:
    """Whether LangGraph stopped at a static breakpoint at this checkpoint (the test of
    LangGraph's ``should_interrupt``: channels updated since the last breakpoint, and a
    node about to run is in ``interrupt_before`` or one that just ran in
    ``interrupt_after``)."""
    checkpoint = tup.checkpoint
    versions = checkpoint.get("channel_versions") or {}
    seen_all = checkpoint.get("versions_seen") or {}
    seen = seen_all.get(_INTERRUPT) or {}
    if not any(str(v) > str(seen.get(ch, "")) for ch, v in versions.items()):
        return False
    if before and (before == "*" or any(n in before for n in nxt)):
        return True
    if after and parent is not None:
        before_seen = parent.checkpoint.get("versions_seen") or {}
        ran = {n for n, vs in seen_all.items() if n != _INTERRUPT and vs != before_seen.get(n)}
        return after == "*" or bool(ran & set(after))
    return False


async def _check_graph(run_id: str, graph: Pregel, tup: CheckpointTuple) -> None:
    """:func:`_check_nodes` on the checkpoint and on those of the subgraphs its pending
    tasks were running, recursively (a node renamed inside a subgraph is caught too)."""
    _check_nodes(run_id, graph, tup)
    saver = graph.checkpointer
    if not isinstance(saver, BaseCheckpointSaver):
        return
    snap = await graph.aget_state(tup.config, subgraphs=True)
    pending: list[tuple[Pregel, StateSnapshot]] = [(graph, snap)]
    while pending:
        parent, state = pending.pop()
        subgraphs = dict(parent.get_subgraphs())
        for task in state.tasks:
            sub = subgraphs.get(task.name)
            if not isinstance(sub, Pregel) or not isinstance(task.state, StateSnapshot):
                continue  # not a local graph (a RemoteGraph keeps its own checkpoints)
            inner = await saver.aget_tuple(task.state.config)  # the subgraph's checkpoint
            if inner is not None:
                _check_nodes(run_id, sub, inner)
            pending.append((sub, task.state))


def _check_nodes(run_id: str, graph: Pregel, tup: CheckpointTuple) -> None:
    """The checkpoint waits only for nodes this graph has; else the graph changed under
    it (a renamed or removed node) and continuing would silently skip work."""
    checkpoint = tup.checkpoint
    seen_all = checkpoint.get("versions_seen") or {}
    waiting: list[str] = []
    for channel, version in (checkpoint.get("channel_versions") or {}).items():
        if not channel.startswith(_TRIGGER):
            continue
        node = channel[len(_TRIGGER) :]
        seen = (seen_all.get(node) or {}).get(channel)
        if seen is None or str(seen) < str(version):
            waiting.append(node)
    sends = (checkpoint.get("channel_values") or {}).get("__pregel_tasks") or []
    waiting.extend(getattr(packet, "node", "") for packet in sends)
    for name in waiting:
        if name and name not in graph.nodes:
            error = DeterminismError(
                run_id,
                f"node:{name}",
                f"the thread's last checkpoint waits for node {name!r}, which this graph "
                f"does not have (it has {sorted(n for n in graph.nodes if n != '__start__')}); "
                "the graph changed under an in-flight thread",
            )
            raise report_determinism(error)


async def _drive(
    graph: Pregel, input: Any, config: RunnableConfig, options: dict[str, Any], local: _Local | None
) -> Any:
    """One LangGraph invocation of the turn, with synchronous checkpoints; its output."""
    if local is None:
        return await graph.ainvoke(input, config, durability="sync", **options)
    if local.queue is None:
        out = await graph.ainvoke(input, config, durability="sync", **options, **local.options)
    else:
        out = None
        async for chunk in graph.astream(
            input, config, durability="sync", **options, **local.options
        ):
            local.queue.put_nowait(chunk)
    local.output, local.has_output = out, local.queue is None
    return out


def _resolve_graph(ref: str, run_id: str, local: _Local | None) -> DurableGraph:
    if local is not None:
        return local.graph
    try:
        found = _located(ref)
    except ConfigurationError as exc:
        error = DeterminismError(run_id, "graph", str(exc))
        raise report_determinism(error) from exc
    if isinstance(found, DurableGraph):
        return found
    wrapped = _WRAPPED.get(ref)
    if wrapped is None or wrapped.compiled is not found:
        wrapped = _WRAPPED[ref] = DurableGraph(found, graph_ref=ref)
    return wrapped


@perdure.workflow(name=WORKFLOW_NAME)
async def thread_run(spec: dict[str, Any]) -> Any:
    """One durable turn of a LangGraph thread (see ``durable``)."""
    ctx = current_run.get()
    run_id = ctx.run_id if ctx is not None else f"plain-{uuid.uuid4().hex}"
    thread = str(spec.get("thread_id") or run_id)
    turn = spec.get("turn")
    local = _LOCAL.get(run_id)
    dg = _resolve_graph(spec["graph"], run_id, local)
    graph = dg.graph_for(ctx.url if ctx is not None else None)
    saver = graph.checkpointer
    assert isinstance(saver, BaseCheckpointSaver)
    serde = saver.serde
    options = {k: _decode(serde, v) for k, v in (spec.get("options") or {}).items()}
    before = options.get("interrupt_before") or graph.interrupt_before_nodes
    after = options.get("interrupt_after") or graph.interrupt_after_nodes
    config = _thread_config(thread, spec.get("config"), run_id=run_id, turn=turn)
    latest = await saver.aget_tuple(_thread_config(thread))
    out: Any = None
    if latest is None or (latest.metadata or {}).get(TURN_KEY) != turn:
        # The turn has not written a checkpoint yet: apply its input (from the
        # checkpoint it names, for time travel and forks).
        start = config
        if (spec.get("config") or {}).get("configurable", {}).get("checkpoint_id"):
            start = config.copy()
            named = spec["config"]["configurable"]["checkpoint_id"]
            start["configurable"] = {**configurable(config), "checkpoint_id": named}
        out = await _drive(graph, _decode(serde, spec["input"]), start, options, local)
    else:
        await _check_graph(run_id, graph, latest)
        snap = await graph.aget_state(config)
        if snap.next and not snap.interrupts:
            parent = (
                None
                if latest.parent_config is None
                else await saver.aget_tuple(latest.parent_config)
            )
            if not _breakpoint_pending(latest, parent, before, after, snap.next):
                out = await _drive(graph, None, config, options, local)
    while True:
        snap = await graph.aget_state(config)
        if snap.interrupts:
            interrupts = list(snap.interrupts)
            name = _signal_name(dg, interrupts)
            with perdure.keyed(_round_key(run_id, interrupts)):
                payload = await perdure.wait_for_signal(
                    name, details=_details(thread, turn, name, interrupts)
                )
            resume = _resume(_decode_payload(serde, payload), interrupts)
            out = await _drive(graph, resume, config, options, local)
            continue
        if snap.next:
            checkpoint_id = configurable(snap.config).get("checkpoint_id")
            with perdure.keyed(f"{run_id}/breakpoint/{checkpoint_id}"):
                payload = await perdure.wait_for_signal(
                    dg.signal,
                    details={
                        "kind": "langgraph_breakpoint",
                        "thread_id": thread,
                        "turn": turn,
                        "signal": dg.signal,
                        "next": list(snap.next),
                        "values": lossy_jsonable(snap.values),
                    },
                )
            if _rejected(payload):
                break
            out = await _drive(graph, None, config, options, local)
            continue
        break
    if local is None or not local.has_output:
        out = _output(graph, snap, None)
    return lossy_jsonable(out)
