"""``durable(compiled_graph)``: every LangGraph thread becomes a perdure run.

* **Checkpoints**: the graph gets a :class:`PerdureSaver` on the perdure store when it has
  no checkpointer, and always runs with ``durability="sync"``: a superstep's checkpoint is
  committed before the next superstep starts, so task ids never change under a crash.
* **A thread is a run** (``run_id`` = ``thread_id``) of the workflow ``langgraph.thread``.
  Its input names the graph by locator (``"module:attribute"``), so ``perdure worker
  MODULE`` re-creates the graph after the process died and the thread continues from its
  last checkpoint. The workflow body takes no perdure positions for graph invocations;
  only interrupt waits are journaled, keyed by the pending interrupt ids, so a replay meets
  the same waits whichever superstep the checkpointer resumes from.
* **Durable side effects in nodes**: every task of every durable graph (nodes, ``Send``
  targets, subgraph nodes, functional ``@task`` calls) runs inside
  ``perdure.keyed(f"{thread_id}/{task_checkpoint_ns}")``; the task namespace is
  ``parent_ns|node:task_id`` and LangGraph derives the task id from the checkpoint id, the
  step and the node. A node re-run after a crash, a retry or ``interrupt()`` therefore
  meets its recorded ``@perdure.effect`` / ``perdure.step`` results, and
  ``perdure.idempotency_key()`` is the same on every re-run.
* **Interrupts are suspensions**: pending ``interrupt(value)`` calls make the run wait for
  the signal ``approval`` (``durable(..., signal=...)`` changes the name; an interrupt
  whose value is a dict with a str ``"signal"`` key names its own). ``perdure approve`` /
  ``reject`` / ``signal RUN_ID approval --data JSON`` deliver the payload as
  ``Command(resume=payload)``. With several interrupts pending, a payload that is a dict
  keyed by interrupt ids resumes those ids; any other payload resumes all of them. The
  decision and its sender are in the run's history (``signal_received``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.pregel import Pregel
from langgraph.pregel import _runner as lg_runner
from langgraph.types import Command, Interrupt, StateSnapshot

import perdure
from perdure import Backend, ConfigurationError, DeterminismError, RunInfo, RunStatus
from perdure.backend import outcome
from perdure.config import resolve_url
from perdure.context import current_run
from perdure.errors import SerializationError
from perdure.locate import find, resolve
from perdure.serialization import to_jsonable
from perdure.spi import report_determinism
from perdure_langgraph._jsonable import to_jsonable as lossy_jsonable
from perdure_langgraph.saver import PerdureSaver

__all__ = ["WORKFLOW_NAME", "DurableGraph", "durable"]

WORKFLOW_NAME = "langgraph.thread"
#: Marks the configs of a durable drive; LangGraph passes it down to every task.
_MARK = "__perdure_thread__"
#: How often a caller looks whether its thread stopped at an interrupt.
_POLL = 0.05
#: LangGraph's channel that triggers node X is ``branch:to:X``.
_TRIGGER = "branch:to:"
_T = TypeVar("_T")


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


def task_key(thread_id: str, task_checkpoint_ns: str) -> str:
    """The journal key of a task's steps: ``thread/parent_ns|node:task_id``."""
    return f"{thread_id}/{task_checkpoint_ns}"


def _install_task_hook() -> None:
    """Wrap LangGraph's async task runner once: tasks of durable drives run keyed."""
    original = lg_runner.arun_with_retry
    if getattr(original, "__perdure__", False):
        return

    async def arun_with_retry(
        task: Any,
        retry_policy: Any,
        stream: bool = False,
        configurable: dict[str, Any] | None = None,
    ) -> Any:
        conf = task.config.get("configurable") or {}
        thread = conf.get(_MARK)
        if thread is not None and current_run.get() is not None:
            ns = str(conf.get("checkpoint_ns") or f"{task.name}:{task.id}")
            task = dataclasses.replace(task, proc=_KeyedProc(task.proc, task_key(thread, ns)))
        return await original(task, retry_policy, stream=stream, configurable=configurable)

    arun_with_retry.__perdure__ = True  # type: ignore[attr-defined]
    lg_runner.arun_with_retry = arun_with_retry  # type: ignore[assignment]


_install_task_hook()


# -- what the process that started a thread holds -------------------------------------------


_END = object()


@dataclass
class _Local:
    graph: DurableGraph
    output: Any = None
    has_output: bool = False
    stream: dict[str, Any] | None = None
    queue: asyncio.Queue[Any] | None = None


_LOCAL: dict[str, _Local] = {}
#: Durable wrappers a worker made for graphs located as plain compiled graphs.
_WRAPPED: dict[str, DurableGraph] = {}


# -- the graph wrapper -----------------------------------------------------------------------


class DurableGraph:
    """A compiled LangGraph graph whose threads are durable perdure runs.

    ``invoke``/``ainvoke``/``stream``/``astream`` start (or join) the run named by the
    config's ``thread_id`` and return when it ends or stops at an interrupt (the output
    then carries ``__interrupt__`` as LangGraph's does). ``ainvoke(Command(resume=v))``
    on a suspended thread delivers ``v`` as the signal the run waits for. Anything else
    is delegated to the compiled graph with its durable checkpointer.
    """

    def __init__(
        self,
        compiled: Pregel,
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
        if compiled.interrupt_before_nodes or compiled.interrupt_after_nodes:
            raise ConfigurationError(
                "durable() does not support static breakpoints (interrupt_before/after): a "
                "durable thread would end at them; call interrupt() inside the node instead"
            )
        self.compiled = compiled
        # Stored graph inputs rebuild only registered types: the ones the schemas declare.
        builder = getattr(compiled, "builder", None)
        perdure.register_type(
            *(getattr(builder, a, None) for a in ("state_schema", "input_schema", "output_schema"))
        )
        self.url = url
        self.graph_ref = graph_ref
        self.signal = signal
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
                saver = PerdureSaver.from_url(resolved)
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
        if name.startswith("__") or name in ("compiled", "_graphs", "_lock"):
            raise AttributeError(name)
        return getattr(self.graph, name)

    def locator(self) -> str:
        """Where a worker finds this graph: ``graph_ref`` or a module-level attribute."""
        if self.graph_ref is not None:
            found = resolve(self.graph_ref, what="graph")
            if not isinstance(found, DurableGraph | Pregel):
                raise ConfigurationError(
                    f"graph_ref {self.graph_ref!r} names a {type(found).__name__}, not a graph"
                )
            return self.graph_ref
        if self._ref is None:
            self._ref = find(self, self.compiled)
        if self._ref is None:
            raise ConfigurationError(
                f"cannot find graph {self.compiled.name!r} (or its durable() wrapper) as a "
                "module-level attribute of an imported module, so a worker could not "
                "re-create it after a crash; define it at module level, or pass "
                "durable(..., graph_ref='module:attribute')"
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
        """Run the thread durably until it ends or waits at an interrupt; its output."""
        return await self._run(input, config, kwargs, stream=None)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """``ainvoke`` on a new event loop (not from inside a running loop)."""
        return _run_sync(lambda: self.ainvoke(input, config, **kwargs))

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Stream the chunks of the drives made by this process (``stream_mode`` etc. as
        in LangGraph) until the thread ends or waits at an interrupt."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        options = {k: kwargs.pop(k) for k in ("stream_mode", "subgraphs", "version") if k in kwargs}
        task = asyncio.get_running_loop().create_task(
            self._run(input, config, kwargs, stream=(options, queue))
        )
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
        """``astream`` collected on a new event loop, then yielded."""

        async def collect() -> list[Any]:
            return [chunk async for chunk in self.astream(input, config, **kwargs)]

        yield from _run_sync(collect)

    async def _run(
        self,
        input: Any,
        config: RunnableConfig | None,
        kwargs: dict[str, Any],
        *,
        stream: tuple[dict[str, Any], asyncio.Queue[Any]] | None,
    ) -> Any:
        thread_id, spec_config = _split_config(config)
        unknown = set(kwargs) - {"durability", "context"}
        if unknown:
            raise ConfigurationError(
                f"durable graphs do not support {sorted(unknown)} on invoke/stream yet"
            )
        if kwargs.get("durability") not in (None, "sync"):
            raise ConfigurationError(
                "durable graphs always checkpoint with durability='sync' (a superstep is "
                "committed before the next starts); other settings would break recovery"
            )
        if kwargs.get("context") is not None:
            raise ConfigurationError("durable graphs do not support a runtime context yet")
        backend = await _isolated(perdure.connect(self.url))
        if isinstance(input, Command) and input.resume is not None:
            return await self._deliver(backend, thread_id, input.resume, stream)
        if isinstance(input, Command):
            raise ConfigurationError(
                "a durable thread takes Command(resume=...) only; goto/update would change "
                "its state outside the recorded run"
            )
        try:
            input_data = to_jsonable(input, "graph input")
        except SerializationError as exc:
            raise ConfigurationError(
                f"the input of a durable graph must be JSON data (or dataclasses / pydantic "
                f"models, e.g. LangChain messages): {exc}"
            ) from None
        spec = {"graph": self.locator(), "input": input_data, "config": spec_config}
        local = _Local(self)
        if stream is not None:
            local.stream, local.queue = stream
        _LOCAL[thread_id] = local
        try:
            await _isolated(backend.start(thread_run, (spec,), {}, run_id=thread_id))
            return await self._finish(backend, thread_id, local)
        finally:
            _LOCAL.pop(thread_id, None)
            if local.queue is not None:
                local.queue.put_nowait(_END)

    async def _deliver(
        self,
        backend: Backend,
        thread_id: str,
        resume: Any,
        stream: tuple[dict[str, Any], asyncio.Queue[Any]] | None,
    ) -> Any:
        info = await backend.get_run(thread_id)
        if info.status is not RunStatus.SUSPENDED or info.waiting_for is None:
            raise perdure.InvalidRunStateError(
                f"thread {thread_id!r} is {info.status.value} and waits for no interrupt "
                "answer; Command(resume=...) has nothing to resume"
            )
        await backend.signal(thread_id, info.waiting_for, resume)
        local = _Local(self)
        if stream is not None:
            local.stream, local.queue = stream
        _LOCAL[thread_id] = local
        try:
            return await self._finish(backend, thread_id, local)
        finally:
            _LOCAL.pop(thread_id, None)
            if local.queue is not None:
                local.queue.put_nowait(_END)

    async def _finish(self, backend: Backend, thread_id: str, local: _Local) -> Any:
        info = await _isolated(_wait_stop(backend, thread_id))
        if info.status is RunStatus.SUSPENDED:
            snap = await self.graph_for(backend.url).aget_state(_thread_config(thread_id))
            return {**_values(snap), "__interrupt__": list(snap.interrupts)}
        value = outcome(info)
        return local.output if local.has_output else value


def durable(
    compiled_graph: Pregel,
    *,
    url: str | None = None,
    graph_ref: str | None = None,
    signal: str = perdure.APPROVAL,
) -> DurableGraph:
    """Make a compiled graph durable: each thread a perdure run, resumable by a worker.

    ``url`` names the perdure store (default: ``PERDURE_URL``, pyproject, SQLite file);
    the graph gets a ``PerdureSaver`` there unless it was compiled with a checkpointer.
    ``graph_ref`` (``"module:attribute"``) says where a worker finds the graph when it
    is not a module-level attribute; ``signal`` is what interrupts wait for.
    """
    return DurableGraph(compiled_graph, url=url, graph_ref=graph_ref, signal=signal)


# -- helpers -----------------------------------------------------------------------------------


def _run_sync(make: Callable[[], Awaitable[_T]]) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigurationError(
            "invoke()/stream() of a durable graph run their own event loop; from async "
            "code use ainvoke()/astream()"
        )

    async def main() -> _T:
        try:
            return await make()
        finally:
            await perdure.shutdown()

    return asyncio.run(main())


async def _isolated(awaitable: Awaitable[_T]) -> _T:
    """Await in a fresh context: a thread started from inside another run's step must
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


def _split_config(config: RunnableConfig | None) -> tuple[str, dict[str, Any]]:
    conf = dict((config or {}).get("configurable") or {})
    thread_id = conf.pop("thread_id", None)
    if not thread_id:
        raise ConfigurationError(
            "a durable graph needs config={'configurable': {'thread_id': ...}}: the thread "
            "id is the perdure run id"
        )
    kept = {k: v for k, v in conf.items() if not k.startswith("__")}
    spec: dict[str, Any] = {"configurable": kept}
    for key in ("recursion_limit", "tags", "metadata"):
        if config is not None and config.get(key) is not None:
            spec[key] = config.get(key)
    try:
        return str(thread_id), to_jsonable(spec, "graph config")
    except SerializationError as exc:
        raise ConfigurationError(
            f"the config of a durable graph must be JSON data so a worker can rebuild it: {exc}"
        ) from None


def _thread_config(
    thread_id: str, spec: dict[str, Any] | None = None, *, mark: bool = False
) -> RunnableConfig:
    """The LangGraph config of a thread; ``mark`` flags it as a durable drive's."""
    spec = spec or {}
    configurable = {**(spec.get("configurable") or {}), "thread_id": thread_id}
    if mark:
        configurable[_MARK] = thread_id
    config: dict[str, Any] = {k: v for k, v in spec.items() if k != "configurable"}
    config["configurable"] = configurable
    return config  # type: ignore[return-value]


def _values(snap: StateSnapshot) -> dict[str, Any]:
    values = snap.values
    return dict(values) if isinstance(values, dict) else {"__root__": values}


# -- the workflow ------------------------------------------------------------------------------


def _pending(snap: StateSnapshot) -> list[Interrupt]:
    return list(snap.interrupts)


def _round_key(thread_id: str, interrupts: Sequence[Interrupt]) -> str:
    ids = sorted(i.id for i in interrupts)
    tag = "+".join(ids) if len(ids) <= 2 else hashlib.sha256("+".join(ids).encode()).hexdigest()
    return f"{thread_id}/interrupt/{tag}"


def _signal_name(graph: DurableGraph, interrupts: Sequence[Interrupt]) -> str:
    names = {
        i.value["signal"]
        for i in interrupts
        if isinstance(i.value, dict) and isinstance(i.value.get("signal"), str)
    }
    return names.pop() if len(names) == 1 else graph.signal


def _details(thread_id: str, name: str, interrupts: Sequence[Interrupt]) -> dict[str, Any]:
    shown = [{"id": i.id, "value": lossy_jsonable(i.value)} for i in interrupts]
    details: dict[str, Any] = {}
    if len(shown) == 1 and isinstance(shown[0]["value"], dict):
        details.update(shown[0]["value"])
    details.update(kind="langgraph_interrupt", thread_id=thread_id, signal=name, interrupts=shown)
    return details


def _resume(payload: Any, interrupts: Sequence[Interrupt]) -> Command[Any]:
    ids = {i.id for i in interrupts}
    if isinstance(payload, dict) and payload and set(payload) <= ids:
        return Command(resume=dict(payload))
    if len(interrupts) == 1:
        return Command(resume=payload)
    return Command(resume=dict.fromkeys(sorted(ids), payload))


async def _check_nodes(run_id: str, graph: Pregel, config: RunnableConfig) -> None:
    """The thread's last checkpoint waits only for nodes this graph has; else the graph
    changed under it (a renamed or removed node) and continuing would silently skip work."""
    saver = graph.checkpointer
    if not isinstance(saver, BaseCheckpointSaver):
        return
    tup = await saver.aget_tuple(config)
    if tup is None:
        return
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


async def _drive(graph: Pregel, input: Any, config: RunnableConfig, local: _Local | None) -> Any:
    """One LangGraph invocation of the thread, with synchronous checkpoints."""
    if local is None or local.queue is None:
        return await graph.ainvoke(input, config, durability="sync")
    options = dict(local.stream or {})
    async for chunk in graph.astream(input, config, durability="sync", **options):
        local.queue.put_nowait(chunk)
    return None


def _resolve_graph(ref: str, run_id: str, local: _Local | None) -> DurableGraph:
    if local is not None:
        return local.graph
    try:
        found = resolve(ref, what="graph")
    except ConfigurationError as exc:
        error = DeterminismError(run_id, "graph", str(exc))
        raise report_determinism(error) from exc
    if isinstance(found, DurableGraph):
        return found
    if isinstance(found, Pregel):
        wrapped = _WRAPPED.get(ref)
        if wrapped is None or wrapped.compiled is not found:
            wrapped = _WRAPPED[ref] = DurableGraph(found, graph_ref=ref)
        return wrapped
    raise ConfigurationError(f"{ref!r} names a {type(found).__name__}, not a graph")


@perdure.workflow(name=WORKFLOW_NAME)
async def thread_run(spec: dict[str, Any]) -> Any:
    """One durable LangGraph thread (see ``durable``)."""
    ctx = current_run.get()
    run_id = ctx.run_id if ctx is not None else f"plain-{uuid.uuid4().hex}"
    local = _LOCAL.get(run_id)
    dg = _resolve_graph(spec["graph"], run_id, local)
    graph = dg.graph_for(ctx.url if ctx is not None else None)
    config = _thread_config(run_id, spec.get("config"), mark=True)
    snap = await graph.aget_state(config)
    out: Any = None
    ran = False
    if not snap.config.get("configurable", {}).get("checkpoint_id"):
        out, ran = await _drive(graph, spec.get("input"), config, local), True
    else:
        await _check_nodes(run_id, graph, config)
        if snap.next and not _pending(snap):
            out, ran = await _drive(graph, None, config, local), True
    while True:
        snap = await graph.aget_state(config)
        interrupts = _pending(snap)
        if not interrupts:
            break
        name = _signal_name(dg, interrupts)
        with perdure.keyed(_round_key(run_id, interrupts)):
            payload = await perdure.wait_for_signal(
                name, details=_details(run_id, name, interrupts)
            )
        out, ran = await _drive(graph, _resume(payload, interrupts), config, local), True
    if snap.next:
        raise perdure.PermanentError(
            f"thread {run_id!r} stopped before nodes {list(snap.next)} without an interrupt; "
            "a durable thread must run to its end or wait at interrupt()"
        )
    if not ran or (out is None and local is not None and local.queue is not None):
        out = snap.values
    if local is not None:
        local.output, local.has_output = out, True
    return lossy_jsonable(out)
