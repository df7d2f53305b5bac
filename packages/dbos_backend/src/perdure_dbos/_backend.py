"""``DbosBackend``: perdure runs as DBOS workflows in a DBOS system database.

A perdure run is one generic DBOS workflow, ``perdure_run(workflow_name, input)``,
whose workflow id is the run id. DBOS is a process-global singleton: every
``DbosBackend`` of a process shares one launched DBOS (same URL), destroyed when the
last one closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, SetWorkflowID

from perdure.backend import Backend, ReconcileOutcome, RunHandle
from perdure.context import current_run
from perdure.engine.owners import new_owner_id, owner_is_dead
from perdure.errors import (
    ApprovalNotPendingError,
    BackendUnavailableError,
    ConfigurationError,
    CorruptHistoryError,
    DeterminismError,
    InvalidRunStateError,
    PerdureError,
    RunNotFoundError,
    SerializationError,
    StepFailedError,
)
from perdure.records import Event, EventKind, RunInfo, RunStatus
from perdure.semantics import approvals
from perdure.serialization import from_jsonable, to_jsonable
from perdure.urls import split_url
from perdure.workflow import Workflow, get_workflow, registered_workflows
from perdure_dbos import _compat
from perdure_dbos._context import (
    CANCEL_KEY,
    LIVE,
    RECONCILE_TOPIC,
    Cancelled,
    DbosRunContext,
    error_info,
    notify,
    wait_until,
)
from perdure_dbos._records import StatusRow, check_format, decode, status_rows, step_rows
from perdure_dbos._serializer import JsonSerializer, StoredError
from perdure_dbos._tables import Mark, Marks

log = logging.getLogger("perdure.dbos")

WORKFLOW_NAME = "perdure_run"
DEFAULT_VERSION = "perdure-1"
STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)
POLL = 0.02
#: Runs this process started and is about to drive (their workflow task is not up yet).
STARTING: set[str] = set()


def application_version() -> str:
    """DBOS's application version, from perdure's code-version policy (not a source hash)."""
    return os.environ.get("PERDURE_CODE_VERSION") or DEFAULT_VERSION


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
class _Runtime:
    """The launched DBOS of this process."""

    url: str
    executor_id: str
    marks: Marks
    refs: int = 0


_runtime: _Runtime | None = None
#: Executor ids of DBOS instances this process launched and destroyed: nothing drives
#: their runs any more, though the process lives on.
_PAST_EXECUTORS: set[str] = set()


def executor_is_dead(executor_id: str) -> bool:
    """True when the process behind ``executor_id`` (a perdure owner id) is gone."""
    return executor_id in _PAST_EXECUTORS or owner_is_dead(executor_id)


def runtime() -> _Runtime:
    if _runtime is None:
        raise ConfigurationError("DBOS is not launched in this process; open a DbosBackend")
    return _runtime


def send_cancel(run_id: str, topic: str) -> None:
    """Wake a run waiting on ``topic`` with the cancellation message."""
    DBOS.send(run_id, {CANCEL_KEY: True}, topic=topic)
    woken(run_id, topic)


def woken(run_id: str, topic: str) -> None:
    """A message on ``topic`` was sent to ``run_id``: if this process drives the run and
    it waits for that topic, it counts as running until it has taken the message."""
    ctx = LIVE.get(run_id)
    if ctx is not None:
        ctx.woken(topic)


# -- the one DBOS workflow ---------------------------------------------------------------


@DBOS.workflow(name=WORKFLOW_NAME, max_recovery_attempts=1_000_000)
async def perdure_run(workflow: str, data: Any) -> Any:
    """Run the perdure workflow ``workflow`` with the stored ``data`` as one DBOS workflow."""
    run_id = cast(str, DBOS.workflow_id)
    rt = runtime()
    ctx = DbosRunContext(run_id, rt.marks, rt.url)
    LIVE[run_id] = ctx
    STARTING.discard(run_id)
    notify()
    token = current_run.set(ctx)
    try:
        return await _run(ctx, get_workflow(workflow), data)
    finally:
        current_run.reset(token)
        ctx.state = "done"
        if LIVE.get(run_id) is ctx:
            del LIVE[run_id]


async def _run(ctx: DbosRunContext, wf: Workflow[..., Any], data: Any) -> Any:
    decoded = from_jsonable(data, f"input of run {ctx.run_id!r}")
    ctx.enter()
    try:
        result = await wf.fn(*decoded["args"], **(decoded.get("kwargs") or {}))
    except Cancelled:
        return await _cancelled(ctx)
    except Exception as exc:
        if ctx.broken is not None:
            return await _park_broken(ctx)
        error = error_info(exc)
        if isinstance(exc, StepFailedError):
            error.update(
                step=exc.step_key,
                attempts=exc.attempts,
                cause={"type": exc.error_type, "message": exc.error_message},
            )
        raise StoredError(error["type"], error["message"], error) from None
    if ctx.broken is not None:
        return await _park_broken(ctx)
    try:
        encoded = to_jsonable(result, f"result of run {ctx.run_id!r}")
    except SerializationError as exc:
        info = error_info(exc)
        raise StoredError(info["type"], info["message"], info) from None
    return {"status": "succeeded", "result": encoded}


async def _cancelled(ctx: DbosRunContext) -> Any:
    try:
        done = await ctx.compensate()
    except StepFailedError as exc:
        attention = {
            "reason": "compensation-failed",
            "step_key": exc.step_key,
            "message": str(exc),
        }
        await asyncio.to_thread(ctx.marks.update, ctx.run_id, attention=attention)
        ctx.state = "parked"
        await asyncio.Event().wait()  # parked until an operator acts; never a wrong end
        raise
    await asyncio.to_thread(ctx.marks.update, ctx.run_id, waiting_for=None, wake_at=None)
    return {"status": "cancelled", "compensated": done}


async def _park_broken(ctx: DbosRunContext) -> Any:
    """Replay disagreed with the history: park, never continue wrongly."""
    assert ctx.broken is not None
    broken = ctx.broken
    attention: dict[str, Any] = {"reason": type(broken).__name__, "message": str(broken)}
    if isinstance(broken, DeterminismError):
        attention.update(reason="determinism", step_key=broken.step_key)
    await asyncio.to_thread(ctx.marks.update, ctx.run_id, attention=attention)
    ctx.state = "parked"
    await asyncio.Event().wait()  # held until this process exits or compatible code resumes
    return None


# -- the backend --------------------------------------------------------------------------


class DbosBackend(Backend):
    """perdure's ``Backend`` on DBOS Transact."""

    def __init__(self, url: str, *, poll_interval: float = 0.2) -> None:
        self.parsed = DbosUrl.parse(url)
        self.url = url
        self.poll_interval = poll_interval
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
        await _compat.use_dbos_thread_pool()

    async def close(self) -> None:
        global _runtime
        if not self._opened:
            return
        self._opened = False
        rt = runtime()
        rt.refs -= 1
        if rt.refs > 0:
            return
        loop = asyncio.get_running_loop()
        tasks = [
            ctx.task
            for ctx in list(LIVE.values())
            if ctx.task is not None and ctx.task.get_loop() is loop and not ctx.task.done()
        ]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        LIVE.clear()
        _PAST_EXECUTORS.add(rt.executor_id)
        _runtime = None
        await asyncio.to_thread(DBOS.destroy)

    @property
    def executor_id(self) -> str:
        return runtime().executor_id

    # -- reading ------------------------------------------------------------------------

    async def _status(self, run_id: str) -> StatusRow:
        """The run's ``workflow_status`` row, read by SQL (never DBOS's decoder)."""
        await self.open()
        rows = await asyncio.to_thread(
            status_rows,
            _compat.system_engine(),
            _compat.system_tables(),
            WORKFLOW_NAME,
            run_ids=[run_id],
        )
        if not rows:
            raise RunNotFoundError(run_id)
        return rows[0]

    async def get_run(self, run_id: str) -> RunInfo:
        st = await self._status(run_id)
        mark = await asyncio.to_thread(runtime().marks.get, run_id)
        return _info(st, mark)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        older_than: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        await self.open()
        rows = await asyncio.to_thread(
            status_rows, _compat.system_engine(), _compat.system_tables(), WORKFLOW_NAME
        )
        marks = await asyncio.to_thread(runtime().marks.get_many, [r.run_id for r in rows])
        before = None if older_than is None else time.time() - older_than
        out: list[RunInfo] = []
        for st in rows:
            info = _listed(st, marks.get(st.run_id))
            if statuses is not None and info.status not in statuses:
                continue
            if workflow is not None and info.workflow != workflow:
                continue
            if before is not None and info.updated_at > before:
                continue
            out.append(info)
            if len(out) >= limit:
                break
        return out

    async def history(self, run_id: str) -> list[Event]:
        st = await self._status(run_id)
        info = _info(st, await asyncio.to_thread(runtime().marks.get, run_id))
        steps = await asyncio.to_thread(_steps, run_id)
        keyed = await asyncio.to_thread(runtime().marks.list_keyed, run_id)
        for key, env, at in keyed:
            steps.append({"function_name": key, "output": env, "completed_at_epoch_ms": at * 1000})
        # Stable: rows of one millisecond keep DBOS's step order.
        steps.sort(
            key=lambda s: s.get("completed_at_epoch_ms") or s.get("started_at_epoch_ms") or 0
        )
        return _history(info, steps)

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
        data = to_jsonable({"args": list(args), "kwargs": kwargs}, f"input of run {run_id!r}")
        marks = runtime().marks
        await asyncio.to_thread(
            marks.insert, run_id, workflow.name, workflow.code_version, parent_run_id
        )
        STARTING.add(run_id)
        try:
            with SetWorkflowID(run_id):
                handle = await DBOS.start_workflow_async(perdure_run, workflow.name, data)
        except BaseException:
            STARTING.discard(run_id)
            raise
        if type(handle).__name__ != "WorkflowHandleAsyncTask":
            STARTING.discard(run_id)  # it exists already; this call does not drive it
            notify()
        return RunHandle(self, run_id)

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> None:
        data = to_jsonable(payload, f"payload of signal {name!r} to run {run_id!r}")
        await self._status(run_id)
        message: dict[str, Any] = {"payload": data, "sent_by": by, "sent_at": time.time()}
        if authorization is not None:
            message["decision"] = authorization
        if approvals.is_approval(name):
            # An answer to an approval request: only while the run waits on it, and the
            # one conditional update of its mark lets exactly one answer through.
            marks = runtime().marks
            info = await self.get_run(run_id)
            mark = await asyncio.to_thread(marks.get, run_id)
            waiting = None if mark is None else mark.waiting_for
            topic = approvals.answer_channel(run_id, info.status, waiting, name)
            if not await asyncio.to_thread(marks.take_signal, run_id, topic):
                raise ApprovalNotPendingError(
                    run_id, approvals.request_of(topic), "another answer was taken first"
                )
            await DBOS.send_async(run_id, message, topic=topic)
            woken(run_id, topic)
            return
        await DBOS.send_async(run_id, message, topic=name)
        woken(run_id, name)
        await asyncio.to_thread(runtime().marks.take_signal, run_id, name)

    async def cancel(self, run_id: str) -> RunInfo:
        info = await self.get_run(run_id)
        if info.status.terminal:
            return info
        marks = runtime().marks
        await asyncio.to_thread(marks.update, run_id, cancel_requested=True)
        mark = await asyncio.to_thread(marks.get, run_id)
        if mark is not None and mark.waiting_for:
            await asyncio.to_thread(send_cancel, run_id, mark.waiting_for)
        if (
            mark is not None
            and mark.attention
            and mark.attention.get("reason") == ("unknown-outcome")
        ):
            topic = f"{RECONCILE_TOPIC}{mark.attention.get('step_key')}"
            await asyncio.to_thread(send_cancel, run_id, topic)
        return await self.get_run(run_id)

    async def resume(self, run_id: str) -> RunInfo:
        info = await self.get_run(run_id)
        if info.attention and info.attention.get("reason") == "unknown-outcome":
            raise InvalidRunStateError(
                f"run {run_id!r} waits for the outcome of step "
                f"{info.attention.get('step_key')!r}; use reconcile, not resume"
            )
        if info.status not in (RunStatus.SUSPENDED, RunStatus.NEEDS_ATTENTION):
            raise InvalidRunStateError(
                f"run {run_id!r} is {info.status.value}; only suspended or parked runs resume"
            )
        await asyncio.to_thread(runtime().marks.update, run_id, attention=None)
        return await self.get_run(run_id)

    async def reconcile(
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
        info = await self.get_run(run_id)
        parked = (info.attention or {}).get("step_key")
        if info.status is not RunStatus.NEEDS_ATTENTION or parked != step_key:
            raise InvalidRunStateError(
                f"run {run_id!r} has no unknown outcome at step {step_key!r} "
                f"(status {info.status.value}, parked step {parked!r})"
            )
        decision: dict[str, Any] = {"outcome": outcome, "by": by, "message": message}
        if authorization is not None:
            decision["decision"] = authorization
        if outcome == "succeeded":
            decision["result"] = to_jsonable(result, f"reconciled result of step {step_key!r}")
        await DBOS.send_async(run_id, decision, topic=f"{RECONCILE_TOPIC}{step_key}")
        woken(run_id, f"{RECONCILE_TOPIC}{step_key}")
        await asyncio.to_thread(runtime().marks.update, run_id, attention=None)
        return await self.get_run(run_id)

    # -- driving ------------------------------------------------------------------------

    async def wait(
        self, run_id: str, *, timeout: float | None = None, drive: bool = True
    ) -> RunInfo:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = await self.get_run(run_id)
            if info.status in STOPPED:
                return info
            if drive and run_id not in LIVE:
                await self._try_take(info)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id!r} still {info.status.value} after {timeout}s")
            await asyncio.sleep(POLL)

    async def idle(self) -> None:
        """Return once every run this process drives is at its next stop."""
        await wait_until(
            lambda: not STARTING and all(ctx.state != "running" for ctx in LIVE.values())
        )

    async def serve(self, *, stop: asyncio.Event, concurrency: int = 100) -> None:
        await self.open()
        while not stop.is_set():
            if not registered_workflows():
                raise ConfigurationError(
                    "this worker has no registered workflows; import the module that defines them"
                )
            await self.recover_dead(limit=max(0, concurrency - len(LIVE)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval)

    async def recover_dead(self, *, limit: int = 100) -> list[str]:
        """Take over PENDING runs whose executor process died; return the run ids taken."""
        await self.open()
        pending = await asyncio.to_thread(
            status_rows,
            _compat.system_engine(),
            _compat.system_tables(),
            WORKFLOW_NAME,
            statuses=["PENDING"],
        )
        taken: list[str] = []
        for st in pending:
            if len(taken) >= limit:
                break
            if await self._try_take_status(st):
                taken.append(st.run_id)
        return taken

    async def _try_take(self, info: RunInfo) -> bool:
        if info.status.terminal:
            return False
        return await self._try_take_status(await self._status(info.run_id))

    async def _try_take_status(self, st: StatusRow) -> bool:
        dead = st.executor_id
        if st.status != "PENDING" or not dead or dead == self.executor_id:
            return False
        if not executor_is_dead(dead):
            return False
        try:
            # DBOS would decode this row's input by its format to run it: refuse a
            # foreign one here, before DBOS sees it.
            check_format(st.run_id, "workflow_status", None, st.serialization)
        except PerdureError as exc:
            log.error("not recovering run %s: %s", st.run_id, exc)
            return False
        mark = await asyncio.to_thread(runtime().marks.get, st.run_id)
        if mark is None or mark.workflow not in registered_workflows():
            return False
        return await asyncio.to_thread(
            _compat.take_over, st.run_id, dead, self.executor_id, application_version()
        )


def inbox() -> sa.Table:
    """DBOS's notifications table (messages sent to workflows)."""
    return cast(sa.Table, _compat.system_tables().notifications)


def recorded_at(run_id: str, function_id: int) -> bool:
    """Whether DBOS recorded the operation ``function_id`` of ``run_id``."""
    from perdure_dbos._records import recorded_at as recorded

    return recorded(_compat.system_engine(), _compat.system_tables(), run_id, function_id)


def _steps(run_id: str) -> list[dict[str, Any]]:
    """The run's DBOS steps with their outputs decoded by perdure (a foreign or corrupt
    row raises, naming the run and the row)."""
    out: list[dict[str, Any]] = []
    for row in step_rows(_compat.system_engine(), _compat.system_tables(), run_id):
        output = decode(run_id, "operation_outputs", row.function_id, row.serialization, row.output)
        decode(run_id, "operation_outputs", row.function_id, row.serialization, row.error)
        out.append(
            {
                "function_id": row.function_id,
                "function_name": row.function_name,
                "output": output,
                "started_at_epoch_ms": row.started_ms,
                "completed_at_epoch_ms": row.completed_ms,
            }
        )
    return out


def check_steps(run_id: str) -> None:
    """Read back every recorded step of ``run_id``; raise for the first bad row."""
    _steps(run_id)


def _sqlite_wal(path: str) -> None:
    """Put DBOS's SQLite file in WAL mode (persistent, once): readers do not block its
    writer, and stores sharing the file (checkpoints, sessions) can open it while DBOS
    holds connections — switching journal modes later needs the file to itself."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")


def _launch(parsed: DbosUrl) -> _Runtime:
    executor_id = new_owner_id()
    config: DBOSConfig = {
        "name": "perdure",
        "system_database_url": parsed.system_database_url,
        "application_version": application_version(),
        "executor_id": executor_id,
        "serializer": JsonSerializer(),
        "log_level": os.environ.get("PERDURE_DBOS_LOG_LEVEL", "WARNING"),
        "notification_listener_polling_interval_sec": 0.05,
        "enable_otlp": False,
    }
    if parsed.schema:
        config["dbos_system_schema"] = parsed.schema
    try:
        if parsed.system_database_url.startswith("sqlite:///"):
            _sqlite_wal(parsed.system_database_url.removeprefix("sqlite:///"))
        DBOS(config=config)
        DBOS.launch()
    except Exception as exc:
        with contextlib.suppress(Exception):
            DBOS.destroy()
        where = urlsplit(parsed.system_database_url)
        raise BackendUnavailableError(
            f"cannot open the DBOS system database at {where.hostname or where.path}"
            f" ({parsed.url}): {type(exc).__name__}: {exc}"
        ) from exc
    schema = _compat.system_tables().workflow_status.schema
    marks = Marks(_compat.system_engine(), schema)
    marks.create()
    return _Runtime(parsed.url, executor_id, marks)


# -- mapping DBOS records to perdure's -------------------------------------------------


def _seconds(ms: Any) -> float:
    return float(ms) / 1000.0 if ms is not None else 0.0


def _inputs(st: StatusRow) -> list[Any]:
    """``perdure_run``'s arguments (workflow name, stored input) from the row."""
    inputs: Any = decode(st.run_id, "workflow_status", None, st.serialization, st.inputs)
    if isinstance(inputs, dict) and "positionalArgs" in inputs:  # DBOS's portable JSON
        return list(inputs.get("positionalArgs") or ())  # pyright: ignore[reportUnknownArgumentType]
    if isinstance(inputs, dict):
        return list(inputs.get("args") or ())  # pyright: ignore[reportUnknownArgumentType]
    return []


def _listed(st: StatusRow, mark: Mark | None) -> RunInfo:
    """``_info``, or for a row perdure cannot or will not read, the run shown as needing
    attention with the reason ``corrupt``: one bad row must not hide the others."""
    try:
        return _info(st, mark)
    except CorruptHistoryError as exc:
        return RunInfo(
            run_id=st.run_id,
            workflow=mark.workflow if mark is not None else "?",
            status=RunStatus.NEEDS_ATTENTION,
            input=None,
            created_at=_seconds(st.created_ms),
            updated_at=_seconds(st.updated_ms),
            attention={"reason": "corrupt", "message": str(exc)},
        )


def _info(st: StatusRow, mark: Mark | None) -> RunInfo:
    args = _inputs(st)
    workflow = mark.workflow if mark is not None else (str(args[0]) if args else "?")
    data = args[1] if len(args) > 1 else None
    info = RunInfo(
        run_id=st.run_id,
        workflow=workflow,
        status=RunStatus.RUNNING,
        input=data,
        created_at=_seconds(st.created_ms),
        updated_at=max(_seconds(st.updated_ms), mark.updated_at if mark else 0.0),
        code_version=mark.code_version if mark else st.app_version,
        owner=st.executor_id,
        cancel_requested=bool(mark and mark.cancel_requested),
        parent_run_id=mark.parent_run_id if mark else None,
        details={"dbos": {"executor_id": st.executor_id, "application_version": st.app_version}},
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
        err = decode(st.run_id, "workflow_status", None, st.serialization, st.error)
        if isinstance(err, StoredError):
            info.error = err.error
        else:
            info.error = {"type": type(err).__name__, "message": str(err)}
    elif status == "CANCELLED":
        info.status = RunStatus.CANCELLED
    elif status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
        info.status = RunStatus.NEEDS_ATTENTION
        info.attention = {"reason": "max-recovery-attempts", "message": "DBOS dead-lettered it"}
    elif mark is not None and mark.attention:
        info.status = RunStatus.NEEDS_ATTENTION
        info.attention = mark.attention
    elif mark is not None and (mark.waiting_for or mark.wake_at):
        info.status = RunStatus.SUSPENDED
        info.waiting_for = mark.waiting_for
        info.wake_at = mark.wake_at
        info.attention = mark.details
    elif status == "ENQUEUED":
        info.status = RunStatus.PENDING
    if not info.status.terminal and info.status is not RunStatus.SUSPENDED:
        executor = st.executor_id or ""
        if executor and executor_is_dead(executor):
            info.details["stranded"] = (
                f"executor {executor} died; a `perdure worker` with workflow "
                f"{workflow!r} (application version {st.app_version}) will recover it"
            )
    return approvals.present(info)


def _history(info: RunInfo, steps: list[Any]) -> list[Event]:
    events: list[Event] = []

    def add(
        kind: EventKind,
        at: float,
        key: str | None = None,
        name: str | None = None,
        data: Any = None,
    ) -> None:
        events.append(Event(info.run_id, len(events) + 1, kind, at, key, name, data))

    add(EventKind.RUN_STARTED, info.created_at, data={"input": info.input})
    wait: tuple[str, dict[str, Any]] | None = None
    for step in steps:
        fname = str(step["function_name"])
        at = _seconds(step.get("completed_at_epoch_ms") or step.get("started_at_epoch_ms"))
        out = step.get("output")
        if fname == "DBOS.recv" and wait is not None:
            key, env = wait
            wait = None
            msg: dict[str, Any] = out if isinstance(out, dict) else {}
            if env["t"] == "park":
                add(EventKind.RECONCILED, at, key, key.partition(":")[2], msg)
            elif out is None:
                add(
                    EventKind.SIGNAL_RECEIVED,
                    at,
                    key,
                    env.get("name"),
                    {"timed_out": True, "timeout": env.get("deadline")},
                )
            else:
                data = {k: msg.get(k) for k in ("payload", "sent_by", "sent_at")}
                if msg.get("decision") is not None:
                    data["decision"] = msg["decision"]
                sent_at = float(msg.get("sent_at") or 0)
                data["waited"] = round(max(0.0, sent_at - float(env.get("_at") or sent_at)), 6)
                if env.get("name") == approvals.APPROVAL:
                    data["request_id"] = approvals.request_id(info.run_id, key)
                add(EventKind.SIGNAL_RECEIVED, at, key, env.get("name"), data)
            continue
        if not isinstance(out, dict) or "t" not in out:
            continue
        env = cast(dict[str, Any], out)
        t = env["t"]
        name = env.get("name")
        if t == "ok":
            data = {k: env.get(k) for k in ("result", "attempt", "kind", "duration")}
            add(EventKind.STEP_COMPLETED, at, fname, name, data)
        elif t == "error":
            if env.get("final"):
                add(
                    EventKind.STEP_FAILED,
                    at,
                    fname,
                    name,
                    {
                        "attempts": env.get("attempt"),
                        "error": env.get("error"),
                        "kind": env.get("kind"),
                    },
                )
            else:
                add(
                    EventKind.ATTEMPT_FAILED,
                    at,
                    fname,
                    name,
                    {
                        "attempt": env.get("attempt"),
                        "error": env.get("error"),
                        "retry_in": env.get("retry_in"),
                    },
                )
        elif t == "intent":
            add(EventKind.INTENT, at, fname, name, {"attempt": env.get("attempt")})
        elif t == "wait":
            env = {**env, "_at": at}
            add(
                EventKind.SUSPENDED,
                at,
                fname,
                name,
                {
                    "waiting_for": name,
                    "wake_at": env.get("deadline"),
                    "details": env.get("details"),
                    **(
                        {"request_id": approvals.request_id(info.run_id, fname)}
                        if name == approvals.APPROVAL
                        else {}
                    ),
                },
            )
            wait = (fname, env)
        elif t == "park":
            add(EventKind.NEEDS_ATTENTION, at, fname, None, env.get("attention"))
            wait = (fname, env)
        elif t == "timer":
            add(
                EventKind.TIMER_STARTED,
                at,
                fname,
                "sleep",
                {"seconds": env.get("seconds"), "wake_at": env.get("wake_at")},
            )
    end = info.updated_at
    if info.status is RunStatus.SUCCEEDED:
        add(EventKind.RUN_SUCCEEDED, end, data={"result": info.result})
    elif info.status is RunStatus.FAILED:
        add(EventKind.RUN_FAILED, end, data=info.error)
    elif info.status is RunStatus.CANCELLED:
        add(EventKind.RUN_CANCELLED, end)
    elif (
        info.status is RunStatus.NEEDS_ATTENTION
        and info.attention
        and not any(e.kind is EventKind.NEEDS_ATTENTION for e in events)
    ):
        add(EventKind.NEEDS_ATTENTION, end, info.attention.get("step_key"), None, info.attention)
    return events


def state_url(url: str) -> str:
    """The SQL database adapters keep their tables in for a DBOS URL: DBOS's system
    database itself (entry-point group ``perdure.state_urls``)."""
    DbosUrl.parse(url)
    return url[len("dbos+") :]


def open_backend(url: str) -> DbosBackend:
    """Entry point for ``perdure.backends``: ``dbos+sqlite`` and ``dbos+postgresql``."""
    return DbosBackend(url)
