"""``DbosBackend``: perdure runs as DBOS workflows, on perdure's shared run semantics.

A perdure run is one DBOS workflow, ``perdure_run(workflow_name, stored_input)``, whose
workflow id is the run id. Inside it, ``perdure.spi.drive`` runs the workflow on a
``DbosJournal`` (each append one DBOS step). A run that suspends or parks ends its DBOS
execution as a *delayed* DBOS workflow on its queue (``Marks.suspend``), holding nothing
while it waits; a delivery (signal, answer, operator, cancellation) enqueues it in the
transaction that stores the delivery, DBOS's own timer when its delay passes, and a
worker of its queue dequeues and drives it again. DBOS schedules, records and recovers; what a
step does on replay, intents, retries, parking, cancellation and the history are
perdure's, the same as on every backend.

DBOS is a process-global singleton: every ``DbosBackend`` of a process shares one
launched DBOS (same URL), destroyed when the last one closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer, SetWorkflowID
from dbos import error as dbos_errors

from perdure.spi import (
    ApprovalNotPendingError,
    Backend,
    BackendUnavailableError,
    Backoff,
    ConfigurationError,
    CorruptHistoryError,
    Drained,
    Event,
    EventKind,
    InvalidInputError,
    LeaseLostError,
    PerdureError,
    ReconcileOutcome,
    RunHandle,
    RunInfo,
    RunNotFoundError,
    RunStatus,
    RunUpdate,
    SubstrateError,
    Workflow,
    approvals,
    classify,
    drive,
    events,
    get_workflow,
    guards,
    new_owner_id,
    park_broken,
    registered_workflows,
    run_filter,
    split_url,
    to_jsonable,
    trace_context,
)
from perdure_dbos import _compat
from perdure_dbos._executors import Executors, Heartbeat, executor_timeout
from perdure_dbos._journal import DbosJournal, pack, read_history
from perdure_dbos._old_layout import OldLayoutError, check_no_unfinished_old_runs
from perdure_dbos._records import (
    WORKFLOW_NAME,
    StatusRow,
    check_format,
    decode,
    listing_filter,
    pending_executors,
    pending_of,
    seconds,
    status_and_marks,
    status_rows,
)
from perdure_dbos._serializer import StoredError
from perdure_dbos._tables import ADMIN, AnswerArrived, Mark, Marks

log = logging.getLogger("perdure.dbos")

#: The DBOS queue recovered runs wait on: only workers (``serve``) dequeue it, so a run
#: of a dead executor goes to a worker, never to a client process that happens to have
#: DBOS launched (DBOS's internal queue, where its own recovery puts them, is dequeued
#: by every launched process).
RECOVERY_QUEUE = "perdure"
#: Seconds: a run whose timer is due within this naps in the process that drives it
#: (``_nap``) instead of suspending; DBOS enqueues a delayed workflow within a second
#: of its delay and a worker dequeues it within a second more.
NAP = 2.0
#: DBOS's statuses of a workflow that returned: the run ended.
ENDED = ("SUCCESS", "ERROR", "CANCELLED")
STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)
#: The DBOS stream a run's workflow writes each time it stops (parks or ends): ``wait``
#: reads it, woken by DBOS's notifications (LISTEN/NOTIFY on PostgreSQL), so a waiter
#: costs nothing while the run is suspended.
STOPS = "perdure.stops"
#: How long a waiter trusts DBOS's notifications before it looks at the run again: a
#: workflow ended outside perdure (``dbos workflow cancel``) writes no stop.
STOP_RECHECK = 60.0
#: How long ``wait`` gives a run's workflow to return once its end is recorded.
RETURN_GRACE = 5.0
#: Runs this process started and is about to drive (their workflow task is not up yet).
STARTING: set[str] = set()


def configured_version() -> str | None:
    """The application version the deployment sets: ``PERDURE_CODE_VERSION`` (perdure's
    code version, recorded on runs), else DBOS's own ``DBOS__APPVERSION``; None lets
    DBOS derive it from the code, as it does for any DBOS application."""
    return os.environ.get("PERDURE_CODE_VERSION") or os.environ.get("DBOS__APPVERSION") or None


def application_version() -> str:
    """The launched DBOS's application version: only its executors recover its runs."""
    return str(DBOS.application_version)


def configured_executor_id() -> str:
    """This process's DBOS executor id: the deployment slot's stable ``DBOS__VMID`` (a
    restart with it recovers the slot's runs at launch, as in DBOS), else an id of this
    process (perdure's owner id, which a worker on this host can see die)."""
    return os.environ.get("DBOS__VMID") or new_owner_id()


@dataclass(frozen=True, slots=True)
class DbosUrl:
    """``dbos+sqlite:///path.db`` or ``dbos+postgresql://...[?schema=name]``, parsed."""

    url: str
    system_database_url: str
    schema: str | None

    @classmethod
    def parse(cls, url: str) -> DbosUrl:
        if not url.lower().startswith("dbos+"):
            raise ConfigurationError(f"not a DBOS URL: {url!r} (expected dbos+sqlite:// or ...)")
        inner = url[len("dbos+") :]
        parts = split_url(inner)
        scheme = parts.scheme.lower()
        if scheme == "sqlite":
            path = inner.removeprefix("sqlite:///")
            if not path or path == ":memory:" or not inner.startswith("sqlite:///"):
                raise ConfigurationError(
                    f"{url!r}: DBOS needs a SQLite file, e.g. dbos+sqlite:///perdure-dbos.db"
                )
            return cls(url, inner, None)
        if scheme in ("postgresql", "postgres"):
            query = parse_qsl(parts.query)
            schema = next((v for k, v in query if k == "schema"), None)
            rest = urlencode([(k, v) for k, v in query if k != "schema"])
            system = urlunsplit(parts._replace(scheme="postgresql", query=rest))
            return cls(url, system, schema)
        raise ConfigurationError(f"{url!r}: DBOS supports dbos+sqlite and dbos+postgresql URLs")


@dataclass(slots=True)
class Live:
    """A run this process executes now; ``state`` is read by ``idle``."""

    task: asyncio.Task[Any] | None
    state: str = "running"  # queued (for a slot) | running | waiting | done

    def set(self, state: str) -> None:
        self.state = state
        notify()


class Slots:
    """How many runs this process drives at once (``serve(concurrency=)``; unbounded
    until a worker sets it). A run holds a slot only while it drives: suspended (or
    napping until a near timer) it holds none. Shared by the event loops DBOS
    runs workflows on, so counted under a thread lock."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.used = 0
        self._lock = threading.Lock()

    def free(self) -> bool:
        return self.limit is None or self.used < self.limit

    def _take(self) -> bool:
        with self._lock:
            if not self.free():
                return False
            self.used += 1
            return True

    @contextlib.asynccontextmanager
    async def held(self, live: Live) -> AsyncIterator[None]:
        if not self._take():
            live.set("queued")
            while not self._take():
                await wait_until(self.free)
        live.set("running")
        try:
            yield
        finally:
            with self._lock:
                self.used -= 1
            notify()


@dataclass(slots=True)
class _Runtime:
    """The launched DBOS of this process."""

    url: str
    executor_id: str
    version: str
    marks: Marks
    executors: Executors
    heartbeat: Heartbeat
    #: The DBOS queues this process dequeues (``_listen``): none for a client; perdure's
    #: queue once a run's execution here suspends or it serves, and the queues it serves.
    listening: frozenset[str]
    slots: Slots = field(default_factory=Slots)
    refs: int = 0
    #: Set while shutting down: drives stop before their next step.
    draining: bool = False
    live: dict[str, Live] = field(default_factory=lambda: {})
    #: The DBOS workflow task of each run this process executes, until the task is done
    #: (DBOS records the workflow's return in it, after ``perdure_run`` returned).
    workflows: dict[str, asyncio.Task[Any]] = field(default_factory=lambda: {})
    #: Runs whose drive here stopped on a ``CancelledError`` the run's own code raised
    #: (a session, a tool): ``wait`` raises it to the caller, as every backend does.
    raised: dict[str, asyncio.CancelledError] = field(default_factory=lambda: {})


_runtime: _Runtime | None = None
_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()


def notify() -> None:
    """Wake every ``wait_until``: a run of this process changed state."""
    for loop, event in list(_waiters):
        with contextlib.suppress(RuntimeError):  # that loop is closed
            loop.call_soon_threadsafe(event.set)


async def wait_until(done: Any) -> None:
    """Return once ``done()`` holds, re-checking whenever a run of this process changes."""
    entry = (asyncio.get_running_loop(), asyncio.Event())
    _waiters.add(entry)
    try:
        while not done():
            await entry[1].wait()
            entry[1].clear()
    finally:
        _waiters.discard(entry)


def runtime() -> _Runtime:
    if _runtime is None:
        raise ConfigurationError("DBOS is not launched in this process; open a DbosBackend")
    return _runtime


def wake(run_id: str) -> None:
    """After a delivery to the run: if it naps in this process (``_nap``), it counts as
    running from now and drives again (``idle`` does not return before it took the
    news); the delivery's own transaction enqueued it if it was suspended."""
    live = runtime().live.get(run_id)
    if live is not None and live.state == "waiting":
        live.set("running")
    notify()


# -- the one DBOS workflow ---------------------------------------------------------------


@DBOS.workflow(name=WORKFLOW_NAME, max_recovery_attempts=100)
async def perdure_run(workflow: str, stored_input: Any) -> Any:
    """Drive the perdure run (this workflow's id) to its end, waiting durably between."""
    run_id = cast(str, DBOS.workflow_id)
    rt = runtime()
    task = asyncio.current_task()
    live = Live(task)
    rt.live[run_id] = live
    if task is not None:
        _track(rt, run_id, task)
    rt.raised.pop(run_id, None)
    STARTING.discard(run_id)
    notify()
    try:
        return await _execute(rt, run_id, workflow, stored_input, live)
    finally:
        if rt.live.get(run_id) is live:
            del rt.live[run_id]
        live.set("done")  # after: a waiter woken sees the run no longer executed here


def _track(rt: _Runtime, run_id: str, task: asyncio.Task[Any]) -> None:
    """Keep ``task`` as the run's workflow task here until it is done."""
    rt.workflows[run_id] = task

    def done(_: object) -> None:
        if rt.workflows.get(run_id) is task:
            del rt.workflows[run_id]

    task.add_done_callback(done)


async def _rows_of(run_ids: Sequence[str]) -> list[StatusRow]:
    """The ``workflow_status`` rows of ``run_ids`` (those that exist), read by SQL."""
    return await asyncio.to_thread(
        status_rows,
        _compat.system_engine(),
        _compat.system_tables(),
        WORKFLOW_NAME,
        run_ids=list(run_ids),
    )


async def _marked(run_ids: Sequence[str]) -> list[tuple[StatusRow, Mark | None]]:
    """``_rows_of``, each with perdure's run row, in one statement."""
    found = await asyncio.to_thread(
        status_and_marks,
        _compat.system_engine(),
        _compat.system_tables(),
        WORKFLOW_NAME,
        runtime().marks.table,
        run_ids=list(run_ids),
    )
    return [(st, Marks.of(row)) for st, row in found]


async def _execute(rt: _Runtime, run_id: str, name: str, stored_input: Any, live: Live) -> Any:
    if name not in registered_workflows():
        await _hand_back(rt, run_id, name)
    journal = DbosJournal(rt.marks, rt.url, run_id, lambda: rt.draining)
    carried: dict[str, Any] = {}
    backoff = Backoff()
    loaded = False
    while True:
        try:
            async with rt.slots.held(live):
                try:
                    if not loaded:
                        await journal.load(stored_input)
                        loaded = True
                    end = journal.ended()
                    if end is not None:
                        await _publish_stop(end.kind.value)
                        return _outcome(end)
                    await journal.take_admin()
                    # Looked up at every drive, as on every backend: the code registered now
                    # (a deploy) replays the history, not the code the run started with.
                    wf = get_workflow(name)
                    status = await drive(
                        journal,
                        wf,
                        stored_input,
                        journal.history,
                        carried=carried,
                        details=journal.details,
                    )
                except CorruptHistoryError as exc:
                    log.error("run %s cannot be replayed: %s", run_id, exc)
                    status = await park_broken(journal, exc)
                except (LeaseLostError, Drained):
                    raise
                except asyncio.CancelledError as exc:
                    task = asyncio.current_task()
                    if task is None or task.cancelling():
                        raise  # this execution is cancelled (a shutdown)
                    # The run's own code raised it: the drive stops here and the caller is
                    # told (``wait``); the workflow stays PENDING, resumable by recovery.
                    rt.raised[run_id] = exc
                    raise
                except AnswerArrived:
                    loaded = False  # drive again: the wait takes the answer
                    continue
                except Exception as exc:
                    if classify(exc) == "transient":
                        log.warning("run %s: the database is away (%s); retrying", run_id, exc)
                        await asyncio.sleep(backoff.delay())
                        loaded = False
                        continue
                    log.error("run %s: the database refused: %s; parking it", run_id, exc)
                    error = (
                        exc
                        if isinstance(exc, PerdureError)
                        else SubstrateError(f"{type(exc).__name__}: {exc}")
                    )
                    status = await park_broken(journal, error)
        except (LeaseLostError, Drained) as exc:
            # Another executor has the run, or this process shuts down: leave the DBOS
            # workflow PENDING for whoever recovers it; nothing more is written here.
            log.info("run %s: %s; this execution stops", run_id, type(exc).__name__)
            raise _ended_here() from None
        backoff.reset()
        if status.terminal:
            end = journal.ended()
            assert end is not None
            await _publish_stop(end.kind.value)
            return _outcome(end)
        if status is RunStatus.NEEDS_ATTENTION:
            await _publish_stop(status.value)
        update = journal.last_update
        wake_at = update.wake_at if update is not None else None
        if wake_at is not None and wake_at - time.time() <= NAP:
            live.set("waiting")
            await _nap(live, wake_at)
        # Still "running" while the suspension is written: ``idle`` (and a drain) waits
        # for it, so a process that exits after ``idle`` leaves the run suspended.
        elif await _suspended(rt, journal, wake_at, backoff):
            # The DBOS execution ends here, holding nothing (no slot, coroutine or
            # connection) while the run waits: a delivery or DBOS's timer enqueues it
            # and a worker drives it again. Nothing fails: CancelledError ends a DBOS
            # execution without recording an outcome.
            log.debug("run %s: suspended until %s", run_id, wake_at)
            raise _ended_here()
        # Every drive replays the history as stored, as on every backend: a row
        # corrupted or repaired while the run waited is seen, not a copy in memory.
        loaded = False


#: Set in a run's execution that perdure ends on purpose (suspended, handed back, lost).
_ENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("perdure_dbos_ending", default=False)


def _ended_here() -> asyncio.CancelledError:
    """The exception that ends this DBOS execution without an outcome (DBOS records
    nothing for a cancelled task); DBOS's warning about it is not logged."""
    _ENDING.set(True)
    return asyncio.CancelledError()


class _QuietEnds(logging.Filter):
    """Drops DBOS's "Asyncio task cancelled" warning for an execution perdure ended on
    purpose (every suspension ends one); a real cancellation is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_ENDING.get() and record.getMessage().startswith("Asyncio task cancelled"))


_QUIET_ENDS = _QuietEnds()


#: Seconds a run dequeued by a process without its workflow waits before it is enqueued
#: again, for a process that has it.
HAND_BACK = 5.0


async def _hand_back(rt: _Runtime, run_id: str, name: str) -> None:
    """This process dequeued a run whose workflow it does not have (a worker of other
    modules on the same queue): put it back, delayed, for a process that has it, rather
    than park it; this execution stops."""
    log.warning(
        "run %s: workflow %r is not registered in this process; handing it back", run_id, name
    )

    def put_back(owner_xid: str) -> None:
        with _compat.system_engine().begin() as c:
            wake_ms = int((time.time() + HAND_BACK) * 1000)
            _compat.suspend_workflow(c, run_id, owner_xid, wake_ms, RECOVERY_QUEUE)

    await asyncio.to_thread(put_back, _compat.current_owner_xid())
    raise _ended_here()


async def _nap(live: Live, wake_at: float) -> None:
    """Wait in this process, reading nothing, until ``wake_at`` or until this process
    wakes the run (``wake``): for a timer so near that suspending the run would only
    delay it (DBOS enqueues delayed workflows once a second). A delivery from another
    process is taken when the nap ends."""
    left = wake_at - time.time()
    if left > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wait_until(lambda: live.state != "waiting"), left)


async def _suspended(
    rt: _Runtime, journal: DbosJournal, wake_at: float | None, backoff: Backoff
) -> bool:
    """Suspend the run (``Marks.suspend``): whether it is; False when a delivery came
    since the drive loaded (it drives again). If another execution owns the workflow,
    this one stops (``CancelledError``)."""
    queue = RECOVERY_QUEUE
    await _listen(rt)  # woken, it is dequeued here if no worker takes it first
    try:
        outcome = await asyncio.to_thread(
            rt.marks.suspend,
            journal.run_id,
            journal.seen,
            _compat.current_owner_xid(),
            wake_at,
            queue,
        )
    except Exception as exc:
        if classify(exc) != "transient":
            raise
        log.warning("run %s: the database is away (%s); retrying", journal.run_id, exc)
        await asyncio.sleep(backoff.delay())
        return False
    if outcome == "lost":
        # Another execution owns the workflow: this one stops, writing nothing more.
        log.info("run %s: LeaseLostError; this execution stops", journal.run_id)
        raise _ended_here()
    return outcome == "suspended"


async def _listen(rt: _Runtime, *queues: str) -> None:
    """Make this process an executor of perdure's queue (and of ``queues``), at once and
    for the rest of its life: DBOS dequeues them here within a second
    (``_compat.listen_also``), and the heartbeat tells other processes it does. A worker
    does it at ``serve``; any other process when a run's execution here first suspends,
    so the run, woken by a delivery from any process, is driven here again if no worker
    takes it first (as DBOS does for a process that does not restrict its queues)."""
    wanted = frozenset((RECOVERY_QUEUE, *queues))
    if wanted <= rt.listening:
        return
    if RECOVERY_QUEUE not in rt.listening:
        await DBOS.register_queue_async(RECOVERY_QUEUE)
    rt.listening = rt.listening | wanted
    _compat.listen_also(rt.listening)
    rt.heartbeat.queues = tuple(sorted(rt.listening))
    await asyncio.to_thread(rt.executors.beat, rt.executor_id, rt.version, rt.heartbeat.queues)


async def _publish_stop(what: str) -> None:
    """Tell the run's waiters it stopped (``wait``): one value on its ``STOPS`` stream,
    written after the stop's record and status, so a waiter woken reads them."""
    await DBOS.write_stream_async(STOPS, what)


def _outcome(end: Event) -> Any:
    """What the DBOS workflow returns (or raises) for the run's end event."""
    data: Any = end.data or {}
    if end.kind is EventKind.RUN_SUCCEEDED:
        return {"status": "succeeded", "result": data.get("result")}
    if end.kind is EventKind.RUN_CANCELLED:
        return {"status": "cancelled", "compensated": data.get("compensated")}
    raise StoredError(str(data.get("type")), str(data.get("message")), data)


# -- the backend --------------------------------------------------------------------------


class DbosBackend(Backend):
    """perdure's ``Backend`` on DBOS Transact."""

    def __init__(
        self, url: str, *, poll_interval: float = 0.2, grace_seconds: float = 30.0
    ) -> None:
        self.parsed = DbosUrl.parse(url)
        self.url = url
        self.poll_interval = poll_interval
        self.grace_seconds = grace_seconds
        self._opened = False

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        global _runtime
        if self._opened:
            return
        if _runtime is None:
            _runtime = _launch(self.parsed)
        elif _runtime.url != self.url:
            raise ConfigurationError(
                f"DBOS is already launched in this process on {_runtime.url!r}; "
                f"one process can use one DBOS system database, not also {self.url!r}"
            )
        _runtime.refs += 1
        self._opened = True
        self.draining.clear()  # opened again after a drain: it takes work again
        await _compat.use_dbos_thread_pool()

    async def close(self) -> None:
        await self.shutdown()

    async def shutdown(self, *, grace: float | None = None) -> None:
        """Drain, then close: drives stop before their next step (what runs finishes and
        records, for up to ``grace`` seconds), and their DBOS workflows stay PENDING for
        the next executor; nothing fails because this process stops."""
        global _runtime
        self.draining.set()
        if not self._opened:
            return
        self._opened = False
        rt = runtime()
        rt.refs -= 1
        if rt.refs > 0:
            return
        _runtime = None
        await _stop(rt, self.grace_seconds if grace is None else grace)

    async def _listen(self, *queues: str) -> None:
        await _listen(runtime(), *queues)

    @property
    def executor_id(self) -> str:
        return runtime().executor_id

    # -- reading ------------------------------------------------------------------------

    async def _status(self, run_id: str) -> StatusRow:
        """The run's ``workflow_status`` row, read by SQL (never DBOS's decoder)."""
        await self.open()
        rows = await _rows_of([run_id])
        if not rows:
            raise RunNotFoundError(run_id)
        return rows[0]

    async def get_run(self, run_id: str) -> RunInfo:
        await self.open()
        found = await _marked([run_id])
        if not found:
            raise RunNotFoundError(run_id)
        st, mark = found[0]
        return _info(st, mark, await self._liveness([st]))

    async def _liveness(self, rows: Sequence[StatusRow]) -> Liveness:
        """The dead executors among those of the PENDING ``rows`` and, if any row waits
        for a worker (its executor dead, or enqueued), what the live workers dequeue."""
        rt = runtime()
        # This process's own executor is alive (it is asking): its beat is not read.
        held = {st.executor_id for st in rows if st.status == "PENDING" and st.executor_id}
        held.discard(rt.executor_id)
        executors = rt.executors
        dead = await asyncio.to_thread(executors.dead, held, executor_timeout()) if held else set()
        if dead or any(st.status == "ENQUEUED" for st in rows):
            workers = await asyncio.to_thread(executors.workers, executor_timeout())
            return Liveness(dead, workers)
        return Liveness(dead)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        older_than: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        await self.open()
        rt = runtime()
        engine, tables = _compat.system_engine(), _compat.system_tables()
        before = None if older_than is None else time.time() - older_than
        where = listing_filter(
            tables,
            rt.marks.table,
            statuses=None if statuses is None else [s.value for s in statuses],
            workflow=workflow,
            updated_before=before,
        )
        wanted = run_filter(statuses=statuses, older_than=older_than, workflow=workflow)
        out: list[RunInfo] = []
        offset = 0
        while len(out) < limit:
            # The database filters; the exact test drops the few rows it kept beyond.
            found = await asyncio.to_thread(
                status_and_marks,
                engine,
                tables,
                WORKFLOW_NAME,
                rt.marks.table,
                where=where,
                limit=limit,
                offset=offset,
            )
            rows = [st for st, _ in found]
            offset += len(rows)
            live = await self._liveness(rows)
            out += [info for st, row in found if wanted(info := _listed(st, Marks.of(row), live))]
            if len(rows) < limit:
                break
        return out[:limit]

    async def history(self, run_id: str) -> list[Event]:
        st = await self._status(run_id)
        stored_input = _stored_input(st)
        found, _ = await asyncio.to_thread(
            read_history, run_id, stored_input, seconds(st.created_ms)
        )
        if isinstance(found, CorruptHistoryError):
            raise found
        return found[0]

    # -- writing ------------------------------------------------------------------------

    async def start(
        self,
        workflow: Workflow[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str,
        parent_run_id: str | None = None,
    ) -> RunHandle:
        await self.open()
        stored = events.encode_input(run_id, args, kwargs)
        rt = runtime()
        await asyncio.to_thread(
            rt.marks.insert,
            run_id,
            workflow.name,
            workflow.code_version,
            parent_run_id,
            trace_context(run_id, workflow.name),
        )
        if rt.draining:
            return RunHandle(self, run_id)
        if workflow.queue is not None:
            # It waits on its DBOS queue for a worker of that queue (its limits apply);
            # this process does not drive it.
            queue = _user_queue(workflow.queue)
            with SetWorkflowID(run_id):
                await DBOS.enqueue_workflow_async(queue, perdure_run, workflow.name, stored)
            return RunHandle(self, run_id)
        STARTING.add(run_id)
        try:
            with SetWorkflowID(run_id):
                handle = await DBOS.start_workflow_async(perdure_run, workflow.name, stored)
        except BaseException:
            STARTING.discard(run_id)
            raise
        if type(handle).__name__ != "WorkflowHandleAsyncTask":
            STARTING.discard(run_id)  # it exists already; this call does not drive it
            notify()
        return RunHandle(self, run_id)

    async def _signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> None:
        if name.startswith("__perdure"):
            raise InvalidInputError("signal name", name, "names starting __perdure are reserved")
        data = to_jsonable(payload, f"payload of signal {name!r} to run {run_id!r}")
        info = await self.get_run(run_id)
        marks = runtime().marks
        if approvals.is_approval(name):
            # An answer to an approval request: only while the run waits on it, and one
            # conditional write lets exactly one answer through (``approvals``).
            mark = await asyncio.to_thread(marks.get, run_id)
            waiting = None if mark is None else mark.waiting_for
            topic = approvals.answer_channel(run_id, info.status, waiting, name)
            if not await asyncio.to_thread(
                marks.deliver_answer, run_id, topic, data, by, authorization
            ):
                raise ApprovalNotPendingError(
                    run_id, approvals.request_of(topic), "another answer was taken first"
                )
        else:
            guards.check_can_signal(run_id, info.status)
            await asyncio.to_thread(marks.deliver, run_id, name, data, by, authorization)
        wake(run_id)

    async def _cancel(self, run_id: str) -> RunInfo:
        info = await self.get_run(run_id)
        guards.check_can_cancel(run_id, info.status)
        await asyncio.to_thread(runtime().marks.request_cancel, run_id)
        wake(run_id)
        return await self.get_run(run_id)

    async def _admin(self, run_id: str, event: Any) -> RunInfo:
        """Hand an operator's record to the run (it appends it at its next drive) and
        make the run due now."""
        rt = runtime()
        # Shown suspended first: the delivery may have the run driven at once.
        await asyncio.to_thread(rt.marks.apply, run_id, RunUpdate(RunStatus.SUSPENDED))
        await asyncio.to_thread(
            rt.marks.deliver, run_id, ADMIN, [pack(event, time.time())], None, None
        )
        wake(run_id)
        return await self.get_run(run_id)

    async def _resume(
        self,
        run_id: str,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> RunInfo:
        guards.check_can_resume(await self.get_run(run_id))
        return await self._admin(run_id, events.resumed(by=by, authorization=authorization))

    async def _reconcile(
        self,
        run_id: str,
        step_key: str,
        outcome: ReconcileOutcome,
        *,
        result: Any = None,
        message: str | None = None,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> RunInfo:
        guards.check_can_reconcile(await self.get_run(run_id), step_key)
        verdict = events.reconciled(
            step_key, outcome, result=result, message=message, by=by, authorization=authorization
        )
        return await self._admin(run_id, verdict)

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        """Delete the DBOS workflows of those runs that ended (their steps, messages and
        perdure's rows of them); the ids deleted. DBOS's own status decides: a run whose
        end is recorded but whose workflow has not returned yet is not finished, and stays."""
        await self.open()
        rows = await _rows_of(run_ids)
        ended = [st.run_id for st in rows if st.status in ENDED]
        if ended:
            await DBOS.delete_workflows_async(ended)
            await asyncio.to_thread(runtime().marks.delete, ended)
        return ended

    # -- driving ------------------------------------------------------------------------

    async def wait(
        self, run_id: str, *, timeout: float | None = None, drive: bool = True
    ) -> RunInfo:
        deadline = None if timeout is None else time.monotonic() + timeout
        stops = 0  # the stops of the run's STOPS stream this wait has seen
        while True:
            info = await self.get_run(run_id)
            if info.status in STOPPED:
                if info.status.terminal and info.details["dbos"]["status"] not in ENDED:
                    await self._returned(run_id)
                return info
            raised = runtime().raised.get(run_id)
            if raised is not None:
                raise raised
            if drive:
                await self._drive_here(info)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"run {run_id!r} still {info.status.value} after {timeout}s")
            if await _next_stop(run_id, stops, STOP_RECHECK if left is None else left):
                stops += 1

    async def _drive_here(self, info: RunInfo) -> None:
        """For ``wait(drive=True)``: if no live worker will drive the run when it is
        due, this process becomes an executor of perdure's queue (as a worker is), so
        DBOS dequeues it here: a run whose executor died (handed to DBOS's recovery), one
        woken and enqueued, one suspended until a timer."""
        dbos: dict[str, Any] = info.details.get("dbos") or {}
        if "stranded" in info.details:
            if info.details.get("unserved"):
                await self._listen()
            if dbos.get("status") == _compat.PENDING:  # its executor died
                await self.recover_dead()
            return
        if dbos.get("status") == _compat.DELAYED and info.wake_at is not None:
            await self._serve_if_unserved(info)

    async def _serve_if_unserved(self, info: RunInfo) -> None:
        """Become an executor of perdure's queue if the run waits there (or will, when
        woken) and no live worker of its application version dequeues it, so that it is
        driven here, as before it suspended. Only a process that can drive the run (its
        workflow registered here) and is not an executor of the queue yet."""
        dbos: dict[str, Any] = info.details.get("dbos") or {}
        if (
            RECOVERY_QUEUE in runtime().listening
            or dbos.get("status") not in (_compat.DELAYED, _compat.ENQUEUED)
            or info.workflow not in registered_workflows()
            or dbos.get("queue") not in (None, RECOVERY_QUEUE)
            or get_workflow(info.workflow).queue is not None
        ):
            return
        workers = await asyncio.to_thread(runtime().executors.workers, executor_timeout())
        if RECOVERY_QUEUE not in workers.get(str(dbos.get("application_version")), ()):
            await self._listen()

    async def _returned(self, run_id: str) -> None:
        """Wait a moment for the workflow of a run whose end is recorded to return, so
        DBOS (its CLI, ``get_result``) shows it ended once ``wait`` returns. DBOS records
        the return just after; if the executor died in between, the run's end stands and
        its recovery will return it, so this waits at most ``RETURN_GRACE``."""
        task = runtime().workflows.get(run_id)
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            # Its workflow runs here: DBOS records the return in that task, which is
            # awaited (whatever it ends with), not polled for.
            await asyncio.wait((task,), timeout=RETURN_GRACE)
            return
        if (await self._status(run_id)).status in ENDED:
            return
        handle = await DBOS.retrieve_workflow_async(run_id)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.get_result(polling_interval_sec=0.02), RETURN_GRACE)

    async def idle(self) -> None:
        """Return once every run this process drives is at its next stop."""
        rt = runtime()
        await wait_until(
            lambda: (
                not STARTING
                and all(lv.state not in ("running", "queued") for lv in rt.live.values())
            )
        )

    async def serve(
        self,
        *,
        stop: asyncio.Event,
        concurrency: int = 100,
        queue: str | None = None,
        rate: float | None = None,
    ) -> None:
        """Drive at most ``concurrency`` runs at once (a run waiting for a signal or a
        timer holds no slot) and recover the runs of dead executors of this version.

        With ``queue``, also dequeue that DBOS queue (the runs of workflows declared
        ``@perdure.workflow(queue=...)``) with its limits: at most ``concurrency`` of its
        runs on this executor at once (DBOS's worker concurrency: a dequeued run counts
        while it drives; suspended, it counts no more) and at most ``rate`` per
        second dequeued by all its workers (DBOS's limiter)."""
        if rate is not None and queue is None:
            raise ConfigurationError(
                "on DBOS, --rate limits a queue: name it with --queue (the workflows "
                "declared with @perdure.workflow(queue=...) run on it)"
            )
        await self.open()
        if queue is None:
            await self._listen()
        else:
            await self._serve_queue(_user_queue(queue), concurrency, rate)
        await self._work(stop, concurrency)

    async def _serve_queue(self, name: str, concurrency: int, rate: float | None) -> None:
        await self._listen(name)
        # DBOS limits whole runs per period: ``rate`` per second as ``limit`` per
        # ``limit / rate`` seconds (0.5/s is 1 per 2 s).
        limit = None if rate is None else max(1, round(rate))
        try:
            await DBOS.register_queue_async(
                name,
                worker_concurrency=concurrency,
                limiter=None
                if rate is None or limit is None
                else {"limit": limit, "period": limit / rate},
                on_conflict="always_update",
            )
        except ValueError as exc:
            raise ConfigurationError(f"DBOS queue {name!r}: {exc}") from exc

    async def _work(self, stop: asyncio.Event, concurrency: int) -> None:
        runtime().slots.limit = concurrency
        notify()
        while not stop.is_set():
            if not registered_workflows():
                raise ConfigurationError(
                    "this worker has no registered workflows; import the module that defines them"
                )
            try:
                await self.recover_dead()
            except Exception as exc:
                if classify(exc) != "transient":
                    raise
                log.warning("the database is away (%s); recovering later", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval)

    async def recover_dead(self) -> list[str]:
        """Hand the PENDING runs of dead executors (of this application version) to
        DBOS's recovery; return the run ids handed over. DBOS re-enqueues them and one
        live executor of the version takes each."""
        await self.open()
        rt = runtime()
        if rt.draining:
            return []
        engine, tables = _compat.system_engine(), _compat.system_tables()
        held = await asyncio.to_thread(pending_executors, engine, tables, WORKFLOW_NAME, rt.version)
        held.discard(rt.executor_id)
        dead = await asyncio.to_thread(rt.executors.dead, held, executor_timeout())
        if not dead:
            return []
        rows = await asyncio.to_thread(
            pending_of, engine, tables, WORKFLOW_NAME, rt.version, sorted(dead)
        )
        marks = await asyncio.to_thread(rt.marks.get_many, [run_id for run_id, _ in rows])
        # Each run goes back to its workflow's queue (its limits hold after a crash too).
        chosen: dict[str, list[str]] = {}
        for run_id, serialization in rows:
            try:
                # DBOS would decode this row's input by its format to run it: refuse a
                # foreign one here, before DBOS sees it.
                check_format(run_id, "workflow_status", None, serialization)
            except PerdureError as exc:
                log.error("not recovering run %s: %s", run_id, exc)
                continue
            mark = marks.get(run_id)
            if mark is not None and mark.workflow in registered_workflows():
                queue = get_workflow(mark.workflow).queue or RECOVERY_QUEUE
                chosen.setdefault(queue, []).append(run_id)
        recovered: list[str] = []
        for queue, run_ids in chosen.items():
            log.info("recovering %d runs of dead executors %s", len(run_ids), sorted(dead))
            recovered += await asyncio.to_thread(_compat.recover, run_ids, sorted(dead), queue)
        return recovered


def _driven_here(run_id: str) -> bool:
    """Whether this process starts or executes the run now."""
    rt = _runtime
    return rt is not None and (run_id in rt.live or run_id in STARTING)


def _changed_here(run_id: str) -> Any:
    """A test of whether, since this call, the run's execution here began or ended or
    its drive here raised: what ``wait`` must look at that publishes no stop. (Other
    runs' changes are not: each would make every waiter of the process look again.)"""
    was = _driven_here(run_id)

    def changed() -> bool:
        rt = _runtime
        return rt is not None and (run_id in rt.raised or _driven_here(run_id) != was)

    return changed


async def _next_stop(run_id: str, offset: int, within: float) -> bool:
    """Wait (for at most ``within`` seconds) until the run publishes its stop number
    ``offset`` (``_publish_stop``) or its execution here begins or ends (a drive here may
    stop without a stop to publish: its own ``CancelledError``); whether that stop came.

    DBOS's stream read waits on its notifications: nothing is read while the run is
    suspended, however long."""
    stop = asyncio.ensure_future(
        DBOS.read_stream_offset_async(
            run_id, STOPS, offset, polling_interval_sec=STOP_RECHECK, timeout_seconds=within
        )
    )
    here = asyncio.ensure_future(wait_until(_changed_here(run_id)))
    try:
        await asyncio.wait((stop, here), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (stop, here):
            task.cancel()
    if not stop.done() or stop.cancelled():
        return False
    error = stop.exception()
    if isinstance(error, dbos_errors.DBOSStreamTimeoutError):
        return False  # a timeout, or the stream ended short of ``offset``: look again
    if error is not None:
        raise error
    return True


async def _stop(rt: _Runtime, grace: float) -> None:
    """Drain ``rt`` (drives stop before their next step; what runs finishes and records
    for up to ``grace`` seconds), then destroy its DBOS: its workflows stay PENDING, and
    with its heartbeat row gone every worker sees the executor dead and recovers them."""
    rt.draining = True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(
            wait_until(lambda: all(lv.state != "running" for lv in rt.live.values())),
            max(grace, 0.0),
        )
    loop = asyncio.get_running_loop()
    tasks = [
        lv.task
        for lv in list(rt.live.values())
        if lv.task is not None and lv.task.get_loop() is loop and not lv.task.done()
    ]
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task
    rt.live.clear()
    await asyncio.to_thread(rt.heartbeat.stop)
    await asyncio.to_thread(DBOS.destroy)


def _user_queue(name: str) -> str:
    """``name`` as a DBOS queue of the user's (not perdure's recovery queue, not DBOS's)."""
    if not name or name == RECOVERY_QUEUE or name.startswith("_dbos_"):
        raise ConfigurationError(
            f"queue {name!r}: {RECOVERY_QUEUE!r} and names starting '_dbos_' are taken "
            "(perdure's recovery queue, DBOS's own); choose another name"
        )
    return name


def _sqlite_wal(path: str) -> None:
    """Put DBOS's SQLite file in WAL mode (persistent, once): readers do not block its
    writer, and stores sharing the file (checkpoints, sessions) can open it while DBOS
    holds connections — switching journal modes later needs the file to itself."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")


def _launch(
    parsed: DbosUrl, *, listening: frozenset[str] = frozenset(), executor_id: str | None = None
) -> _Runtime:
    executor_id = executor_id or configured_executor_id()
    config: DBOSConfig = {
        "name": "perdure",
        "system_database_url": parsed.system_database_url,
        "executor_id": executor_id,
        # Portable JSON: DBOS's own CLI and API decode every perdure record.
        "serializer": DBOSPortableJSONSerializer(),
        "log_level": os.environ.get("PERDURE_DBOS_LOG_LEVEL", "WARNING"),
        "notification_listener_polling_interval_sec": 0.05,
        "enable_otlp": False,
    }
    version = configured_version()
    if version is not None:
        config["application_version"] = version
    if parsed.schema:
        config["dbos_system_schema"] = parsed.schema
    try:
        if parsed.system_database_url.startswith("sqlite:///"):
            _sqlite_wal(parsed.system_database_url.removeprefix("sqlite:///"))
        # Before DBOS launches: its recovery at launch would replay such runs wrongly.
        check_no_unfinished_old_runs(parsed.system_database_url, parsed.schema)
        DBOS(config=config)
        logging.getLogger("dbos").addFilter(_QUIET_ENDS)  # once: a filter is a set member
        DBOS.listen_queues(sorted(listening))
        DBOS.launch()
    except OldLayoutError:
        raise
    except Exception as exc:
        with contextlib.suppress(Exception):
            DBOS.destroy()
        where = urlsplit(parsed.system_database_url)
        raise BackendUnavailableError(
            f"cannot open the DBOS system database at {where.hostname or where.path}"
            f" ({parsed.url}): {type(exc).__name__}: {exc}"
        ) from exc
    schema = _compat.system_tables().workflow_status.schema
    engine = _compat.system_engine()
    marks = Marks(engine, schema)
    marks.create()
    executors = Executors(engine, schema)
    executors.create()
    version = application_version()
    heartbeat = Heartbeat(executors, executor_id, version, listening)
    heartbeat.start()
    return _Runtime(parsed.url, executor_id, version, marks, executors, heartbeat, listening)


# -- mapping DBOS records to perdure's -------------------------------------------------


def _inputs(st: StatusRow) -> list[Any]:
    """``perdure_run``'s arguments (workflow name, stored input) from the row."""
    inputs: Any = decode(st.run_id, "workflow_status", None, st.serialization, st.inputs)
    if isinstance(inputs, dict) and "positionalArgs" in inputs:  # DBOS's portable JSON
        return list(inputs.get("positionalArgs") or ())  # pyright: ignore[reportUnknownArgumentType]
    if isinstance(inputs, dict):
        return list(inputs.get("args") or ())  # pyright: ignore[reportUnknownArgumentType]
    return []


def _stored_input(st: StatusRow) -> Any:
    args = _inputs(st)
    return args[1] if len(args) > 1 else None


def _listed(st: StatusRow, mark: Mark | None, live: Liveness) -> RunInfo:
    """``_info``, or for a row perdure cannot or will not read, the run shown as needing
    attention with the reason ``corrupt``: one bad row must not hide the others."""
    try:
        return _info(st, mark, live)
    except CorruptHistoryError as exc:
        return RunInfo(
            run_id=st.run_id,
            workflow=mark.workflow if mark is not None else "?",
            status=RunStatus.NEEDS_ATTENTION,
            input=None,
            created_at=seconds(st.created_ms),
            updated_at=seconds(st.updated_ms),
            attention={"reason": "corrupt", "message": str(exc)},
        )


def _error(st: StatusRow) -> dict[str, Any]:
    err: Any = decode(st.run_id, "workflow_status", None, st.serialization, st.error)
    if isinstance(err, dict):
        if isinstance(err.get("data"), dict):  # DBOS's portable error: {name, message, data}
            return cast(dict[str, Any], err["data"])
        return {"type": str(err.get("name") or err.get("type")), "message": str(err.get("message"))}
    if isinstance(err, StoredError):
        return err.error
    return {"type": type(err).__name__, "message": str(err)}


@dataclass(frozen=True, slots=True)
class Liveness:
    """What ``_info`` knows of the executors: the dead ones among the runs' executors and
    (when a run waits for a worker) the queues live workers dequeue, by version."""

    dead: set[str]
    workers: dict[str, set[str]] | None = None

    def waiting(self, st: StatusRow, workflow: str) -> tuple[str, bool] | None:
        """Why no worker drives the run, if none does (its executor died, or it is
        enqueued) and whether a live worker of its application version will take it."""
        version = st.app_version or "?"
        if st.status == "PENDING" and (st.executor_id or "") in self.dead:
            why, queue = f"executor {st.executor_id} died", RECOVERY_QUEUE
        elif st.status == "ENQUEUED":
            queue = st.queue or RECOVERY_QUEUE
            why = f"enqueued on DBOS queue {queue!r}"
        else:
            return None
        workers = self.workers or {}
        if queue in workers.get(version, ()):
            return f"{why}; a live worker of application version {version} will take it", True
        live = ", ".join(sorted(workers)) or "none"
        flag = "" if queue == RECOVERY_QUEUE else f" --queue {queue}"
        return (
            f"{why}; no live worker of application version {version} dequeues {queue!r}"
            f" (live workers' versions: {live}): start `perdure worker{flag}` with"
            f" workflow {workflow!r} and PERDURE_CODE_VERSION={version}"
        ), False


def _info(st: StatusRow, mark: Mark | None, live: Liveness) -> RunInfo:
    """The run as perdure shows it; ``live``: what is known of its executor."""
    args = _inputs(st)
    workflow = mark.workflow if mark is not None else (str(args[0]) if args else "?")
    info = RunInfo(
        run_id=st.run_id,
        workflow=workflow,
        status=RunStatus.RUNNING,
        input=args[1] if len(args) > 1 else None,
        created_at=seconds(st.created_ms),
        updated_at=max(seconds(st.updated_ms), mark.updated_at if mark else 0.0),
        code_version=mark.code_version if mark else st.app_version,
        owner=st.executor_id,
        cancel_requested=bool(mark and mark.cancel_requested),
        parent_run_id=mark.parent_run_id if mark else None,
        details={
            **(mark.details if mark else {}),
            "dbos": {
                "status": st.status,
                "executor_id": st.executor_id,
                "application_version": st.app_version,
                "queue": st.queue,
            },
        },
    )
    status = st.status
    if status == "SUCCESS":
        out: Any = decode(st.run_id, "workflow_status", None, st.serialization, st.output) or {}
        if out.get("status") == "cancelled":
            info.status = RunStatus.CANCELLED
        else:
            info.status = RunStatus.SUCCEEDED
            info.result = out.get("result")
    elif status == "ERROR":
        info.status = RunStatus.FAILED
        info.error = _error(st)
    elif status == "CANCELLED":
        info.status = RunStatus.CANCELLED
    elif status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
        info.status = RunStatus.NEEDS_ATTENTION
        info.attention = {"reason": "max-recovery-attempts", "message": "DBOS dead-lettered it"}
    elif mark is not None:
        info.status = RunStatus(mark.status)
        info.waiting_for = mark.waiting_for
        info.wake_at = mark.wake_at
        info.attention = mark.attention
        info.result = mark.result
        info.error = mark.error
        if status == "ENQUEUED" and info.status is RunStatus.RUNNING:
            info.status = RunStatus.PENDING
    stranded = None if info.status.terminal else live.waiting(st, workflow)
    if stranded is not None:
        info.details["stranded"] = stranded[0]
        if not stranded[1]:
            info.details["unserved"] = True
    return approvals.present(info)


def state_url(url: str) -> str:
    """The SQL database adapters keep their tables in for a DBOS URL: DBOS's system
    database itself (entry-point group ``perdure.state_urls``)."""
    DbosUrl.parse(url)
    return url[len("dbos+") :]


def open_backend(url: str) -> DbosBackend:
    """Entry point for ``perdure.backends``: ``dbos+sqlite`` and ``dbos+postgresql``."""
    return DbosBackend(url)
