"""``TemporalBackend``: perdure runs as Temporal workflows that Temporal drives.

Each run is one ``perdure.run`` workflow (``workflow.py``) whose id is the run id after
the URL's ``id_prefix``; Temporal schedules its drives (``drive.py``) on any worker of
the task queue, times its waits and retries a drive whose worker died. This class is
what the API and the CLI see: starting is ``start_workflow``, a signal is a Temporal
signal, cancel/resume/reconcile are updates, reads are ``describe`` and the event
history, listings are visibility queries, and waiting is a long poll on the history —
no queries, no updates and no polling while a run waits.

Every process that opens the backend runs a worker for the workflow's (tiny) tasks;
one that starts, waits on or serves runs also runs drives (``perdure worker`` is
exactly that, with ``--concurrency`` drives at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from temporalio.api.common.v1 import WorkflowExecution as ProtoExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from perdure.spi import (
    ApprovalNotPendingError,
    Backend,
    BackendUnavailableError,
    ConfigurationError,
    CorruptHistoryError,
    Event,
    EventKind,
    InvalidRunStateError,
    NewEvent,
    ReconcileOutcome,
    RunHandle,
    RunInfo,
    RunNotFoundError,
    RunStatus,
    SerializationError,
    Workflow,
    approvals,
    events,
    guards,
    registered_workflows,
    run_filter,
    to_jsonable,
    trace_context,
)
from perdure_temporal.codec import Values
from perdure_temporal.connection import connect
from perdure_temporal.drive import Drives
from perdure_temporal.faults import ride_out
from perdure_temporal.history import read_history
from perdure_temporal.payloads import PayloadStore, open_payloads
from perdure_temporal.url import TemporalUrl, with_task_queue
from perdure_temporal.versioning import deployment_version, pinned
from perdure_temporal.worker import (
    DriveSlots,
    RunWorker,
    drive_worker,
    replay_failure,
    sticky_timeout,
)
from perdure_temporal.workflow import (
    APPROVAL_NOT_PENDING,
    INPUT_MEMO,
    INVALID_STATE,
    MEMO,
    STATUS,
    TASK_TIMEOUT,
    TERMINAL,
    WORKFLOW,
    WORKFLOW_TYPE,
    PerdureRun,
    initial_memo,
)

log = logging.getLogger("perdure.temporal")

#: A parked run stops ``wait``: someone has to act before it can go on.
STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)
#: Statuses of a run that is not moving by itself (what ``idle`` waits for).
STILL = (*STOPPED, RunStatus.SUSPENDED)
#: Drives one process runs at once unless ``serve`` says otherwise.
DEFAULT_CONCURRENCY = 100
#: History events after which a waiting caller reads the run again.
_CHANGES = (
    EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
)


class TemporalBackend(Backend):
    """Runs on the namespace and task queue of a ``temporal://`` URL."""

    def __init__(self, url: str, *, payloads: PayloadStore | None = None) -> None:
        self.url = url
        self.config = TemporalUrl.parse(url)
        self.values = Values(self.config, payloads or open_payloads(self.config))
        #: This process's code version as a Worker Deployment version (or None).
        self.version = deployment_version(self.config.task_queue)
        self._client: Client | None = None
        #: The worker thread: workflow tasks, and drives once this process runs them.
        self._workflows: RunWorker | None = None
        self._drives: Drives | None = None
        #: With ``role=drives``: the drives' own worker, on this loop.
        self._drive_worker: Worker | None = None
        self._drive_task: asyncio.Task[None] | None = None
        self._started: set[str] = set()
        #: The first execution of each run started here, until a caller waits on it.
        self._executions: dict[str, str] = {}
        self._opening = asyncio.Lock()
        #: ``Client.connect`` options as of ``open`` (the client and the worker thread's).
        self._connect: dict[str, Any] = {}

    # -- connection ----------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            raise BackendUnavailableError(f"{self.config.target}: the backend is not open")
        return self._client

    async def open(self) -> None:
        async with self._opening:
            if self._client is not None:
                return
            cfg = self.config
            options = cfg.connect_options()
            client = await connect(options)
            self._connect = options
            workflows: RunWorker | None = None
            if cfg.role != "drives":
                workflows = self._run_worker()
                await asyncio.to_thread(workflows.start)
            self._client = client
            self._workflows = workflows
            self.draining.clear()  # opened again after a drain: it takes work again

    async def shutdown(self, *, grace: float | None = None) -> None:
        """Drain: drives stop before their next step (the step in hand records) and the
        workflow hands the run to the next drive, on another worker; then close."""
        self.draining.set()
        if self._drives is not None:
            self._drives.draining = True
            running = list(self._drives.running.values())
            if running:
                await asyncio.wait(running, timeout=30.0 if grace is None else grace)
        await self.close()

    async def close(self) -> None:
        worker, task = self._drive_worker, self._drive_task
        self._drive_worker = self._drive_task = self._drives = None
        if worker is not None:
            with contextlib.suppress(Exception):
                await worker.shutdown()
        if task is not None:
            with contextlib.suppress(BaseException):
                await task
        workflows = self._workflows
        self._client = self._workflows = None
        if workflows is not None:
            await asyncio.to_thread(workflows.stop)

    def _run_worker(self, drives: DriveSlots | None = None) -> RunWorker:
        """The worker thread, connected as this process's client is (same TLS, key,
        codec: a drive's payloads open with the converter that sealed them)."""
        cfg = self.config
        return RunWorker(
            self._connect,
            cfg.task_queue,
            sticky_timeout(cfg.heartbeat_timeout),
            self.version,
            drives,
        )

    async def _ensure_drives(
        self, concurrency: int = DEFAULT_CONCURRENCY, rate: float | None = None
    ) -> Drives | None:
        """Run drives in this process (on this loop) from now on, unless its role is
        ``workflows`` (then drives run in other processes). The worker thread's Temporal
        worker takes them from then on (it is replaced by one that also runs the drive
        activity: Temporal starts a drive eagerly only on the worker whose workflow task
        scheduled it); with ``role=drives``, a worker on this loop does."""
        await self.open()
        cfg = self.config
        if self._drives is not None or cfg.role == "workflows":
            return self._drives
        drives = Drives(self.url, self.client, self.values)
        slots = DriveSlots(drives, concurrency, cfg.heartbeat_timeout, rate)
        self._drives = drives
        if self._workflows is not None:
            both = self._run_worker(slots)
            await asyncio.to_thread(both.start)
            # The workflow-only worker stops after the new one polls: no gap in which
            # this process's workflow tasks wait for a worker.
            previous, self._workflows = self._workflows, both
            await asyncio.to_thread(previous.stop)
        else:
            worker = drive_worker(self.client, cfg.task_queue, slots, self.version)
            self._drive_worker = worker
            self._drive_task = asyncio.get_running_loop().create_task(
                worker.run(), name=f"perdure-drives-{cfg.task_queue}"
            )
        return drives

    def workflow_id(self, run_id: str) -> str:
        return f"{self.config.id_prefix}{run_id}"

    def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(self.workflow_id(run_id))

    # -- reading -------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo:
        await self.open()
        info, _, _ = await self._describe(run_id)
        return info

    async def _describe(self, run_id: str) -> tuple[RunInfo, int, str]:
        """The run as its workflow's memo shows it, the history length of the workflow's
        current execution, and that execution's id."""
        handle = self._handle(run_id)
        try:
            desc = await ride_out(f"describe of run {run_id!r}", handle.describe)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(run_id) from None
            raise BackendUnavailableError(f"describe of run {run_id!r}: {exc}") from exc
        info = await self._info_from_memo(run_id, desc.memo)
        closed = desc.status not in (None, WorkflowExecutionStatus.RUNNING)
        if closed and info.status.value not in TERMINAL:
            # Ended by Temporal itself (terminated, timed out), not by the run.
            status = desc.status.name if desc.status is not None else "closed"
            info.status = RunStatus.FAILED
            info.error = {"type": "WorkflowClosed", "message": f"the workflow was {status}"}
        return info, desc.history_length, desc.run_id

    async def _info_from_memo(
        self, run_id: str, memo: Callable[[], Awaitable[Mapping[str, Any]]]
    ) -> RunInfo:
        """The run its workflow's memo records; ``CorruptHistoryError`` when the memo
        cannot be decoded or is not a run record (``SerializationError`` when it is
        sealed with a key this process lacks)."""
        try:
            decoded = await memo()
        except SerializationError:
            raise
        except Exception as exc:  # the payload converter's own errors
            raise CorruptHistoryError(
                run_id, None, f"the workflow's memo cannot be decoded: {type(exc).__name__}: {exc}"
            ) from None
        run = decoded.get(MEMO)
        if not isinstance(run, dict):
            raise RunNotFoundError(run_id)  # not a perdure run
        try:
            return await self.values.info(
                cast(dict[str, Any], run), input_text=decoded.get(INPUT_MEMO)
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptHistoryError(
                run_id, None, f"the run record in the workflow's memo is malformed: {exc!r}"
            ) from None

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        older_than: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Runs newest first, from visibility alone (memo and search attributes), paged."""
        await self.open()
        query = (
            f"WorkflowType = '{WORKFLOW_TYPE}' AND TaskQueue = {_quote(self.config.task_queue)}"
            " AND ExecutionStatus != 'ContinuedAsNew'"
        )
        if statuses:
            query += f" AND PerdureStatus IN ({', '.join(_quote(s.value) for s in statuses)})"
        if workflow is not None:
            query += f" AND PerdureWorkflow = {_quote(workflow)}"
        # Visibility lags a moment behind the memo: the memo decides.
        wanted = run_filter(statuses=statuses, older_than=older_than, workflow=workflow)
        prefix = self.config.id_prefix
        out: list[RunInfo] = []
        async for wf in self.client.list_workflows(query, page_size=min(max(limit, 10), 1000)):
            if not wf.id.startswith(prefix):
                continue
            run_id = wf.id[len(prefix) :]
            try:
                info = await self._info_from_memo(run_id, wf.memo)
            except RunNotFoundError:
                continue
            except (CorruptHistoryError, SerializationError) as exc:
                # One bad record must not hide every other run from a listing.
                info = _unreadable(run_id, wf, exc)
            if not wanted(info):
                continue
            out.append(info)
            if len(out) >= limit:
                break
        out.sort(key=lambda r: r.created_at, reverse=True)
        return out

    async def history(self, run_id: str) -> list[Event]:
        await self.open()
        try:
            rows = await ride_out(
                f"history of run {run_id!r}",
                lambda: read_history(self.client, self.workflow_id(run_id)),
            )
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(run_id) from None
            raise
        return await self.values.events(run_id, rows)

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        """Delete the workflow executions of those runs that have ended (every execution
        a run continued as new into), each once Temporal no longer finds it; the ids
        deleted. Payloads stored aside are content-addressed and may be shared by other
        runs: the payload store's own retention removes them (``pg_payloads``)."""
        await self.open()
        gone: list[str] = []
        for run_id in run_ids:
            try:
                info = await self.get_run(run_id)
            except RunNotFoundError:
                continue
            if not info.status.terminal:
                continue
            await self._delete_run(run_id)
            gone.append(run_id)
        return gone

    async def _delete_run(self, run_id: str) -> None:
        wid = self.workflow_id(run_id)
        what = f"deletion of run {run_id!r}"
        query = f"WorkflowId = {_quote(wid)}"
        executions = [wf.run_id async for wf in self.client.list_workflows(query)]
        for execution in executions:
            await ride_out(what, functools.partial(self._delete, wid, execution))
        await ride_out(what, functools.partial(self._deleted, run_id))

    async def _delete(self, workflow_id: str, execution: str) -> None:
        request = DeleteWorkflowExecutionRequest(
            namespace=self.config.namespace,
            workflow_execution=ProtoExecution(workflow_id=workflow_id, run_id=execution),
        )
        try:
            await self.client.workflow_service.delete_workflow_execution(request)
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise

    async def _deleted(self, run_id: str) -> None:
        """Returns once the run is gone; Temporal deletes in the background, and until
        then the run still reads back (a passing state: ``ride_out`` asks again)."""
        try:
            await self._handle(run_id).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return
            raise
        raise TimeoutError(f"run {run_id!r} is still being deleted")

    async def check_substrate_replay(self, run_id: str) -> str | None:
        """Temporal's ``Replayer`` on the run's current execution with this process's
        ``perdure.run`` workflow: what it finds nondeterministic, or None."""
        await self.open()
        try:
            history = await ride_out(
                f"history of run {run_id!r}", lambda: self._handle(run_id).fetch_history()
            )
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(run_id) from None
            raise
        return await replay_failure(history, self.client.data_converter)

    # -- starting and waiting ------------------------------------------------------------

    async def start(
        self,
        workflow: Workflow[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str,
        parent_run_id: str | None = None,
    ) -> RunHandle:
        await self._ensure_drives()
        now = time.time()
        text, ref = await self.values.pack(events.encode_input(run_id, args, kwargs))
        run: dict[str, Any] = {
            "run_id": run_id,
            "workflow": workflow.name,
            # Running from its start, as Temporal shows the execution: the workflow's
            # first task schedules the drive, and publishing a pending -> running change
            # there would cost two history events and a visibility write per run.
            "status": RunStatus.RUNNING.value,
            "input": text,
            "input_ref": ref,
            "created_at": now,
            "updated_at": now,
            "code_version": workflow.code_version,
            "result": None,
            "result_ref": None,
            "error": None,
            "fence": 0,
            "cancel_requested": False,
            "waiting_for": None,
            "wake_at": None,
            "attention": None,
            "parent_run_id": parent_run_id,
            # the caller's trace context: every drive's span continues that trace
            "details": trace_context(run_id, workflow.name),
        }
        event = {
            "kind": EventKind.RUN_STARTED.value,
            "at": now,
            "step_key": None,
            "name": None,
            "data": text,
            "data_ref": ref,
        }
        cfg = self.config
        start = {
            "run": run,
            "event": event,
            # the memo and search attributes given to start_workflow below
            "published": True,
            "config": {
                "task_queue": cfg.task_queue,
                "history_limit": cfg.history_limit,
                "heartbeat_timeout": cfg.heartbeat_timeout,
                "drive_timeout": cfg.drive_timeout,
            },
        }
        try:
            started = await ride_out(
                f"start of run {run_id!r}",
                lambda: self.client.start_workflow(
                    PerdureRun.main,
                    start,
                    id=self.workflow_id(run_id),
                    task_queue=cfg.task_queue,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                    task_timeout=TASK_TIMEOUT,
                    memo=initial_memo(run),
                    search_attributes=TypedSearchAttributes(
                        [
                            SearchAttributePair(STATUS, RunStatus.RUNNING.value),
                            SearchAttributePair(WORKFLOW, workflow.name),
                        ]
                    ),
                    static_summary=f"perdure run of {workflow.name}",
                    # on the workers of the code it starts on (Worker Versioning)
                    versioning_override=pinned(self.version),
                ),
            )
            if started.first_execution_run_id is not None:
                self._executions[run_id] = started.first_execution_run_id
        except WorkflowAlreadyStartedError:
            pass  # starting is idempotent: this is the run that exists
        except RPCError as exc:
            if exc.status is RPCStatusCode.INVALID_ARGUMENT and "search attribute" in exc.message:
                raise ConfigurationError(
                    f"namespace {cfg.namespace!r} lacks perdure's search attributes "
                    "(PerdureStatus, PerdureWorkflow): run `python -m perdure_temporal.setup "
                    f"--url ...` once ({exc.message})"
                ) from None
            raise BackendUnavailableError(f"could not start run {run_id!r}: {exc}") from exc
        self._started.add(run_id)
        return RunHandle(self, run_id)

    async def wait(
        self, run_id: str, *, timeout: float | None = None, drive: bool = True
    ) -> RunInfo:
        if drive:
            await self._ensure_drives()
        else:
            await self.open()
        try:
            return await asyncio.wait_for(self._stopped(run_id), timeout)
        except TimeoutError:
            info = await self.get_run(run_id)
            raise TimeoutError(
                f"run {run_id!r} still {info.status.value} after {timeout}s"
            ) from None

    async def _stopped(self, run_id: str) -> RunInfo:
        """The run once it stopped; or the ``CancelledError`` its own code raised in a
        drive of this process (a session's, a tool's), raised here as itself."""
        drives = self._drives
        if drives is None:
            return await self._until(run_id, STOPPED)
        with drives.watching(run_id) as raised:
            until = asyncio.ensure_future(self._until(run_id, STOPPED))
            try:
                await asyncio.wait((until, raised), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not until.done():
                    until.cancel()
                    with contextlib.suppress(BaseException):
                        await until
        if until.done() and not until.cancelled():
            drives.forget_raised(run_id)
            return until.result()
        raise raised.result()

    async def _until(self, run_id: str, statuses: Sequence[RunStatus]) -> RunInfo:
        """Long-poll the run's history; read the run again only when its record changed.

        Waiting for the run to stop, a caller long-polls for the close of the workflow's
        current execution alone (one request, answered when the run ends, or parks:
        the workflow continues as new then). Waiting for it to stop moving (``idle``)
        wakes on every change of its record, since a suspension closes nothing."""
        suspension = RunStatus.SUSPENDED in statuses
        execution = self._executions.pop(run_id, None)
        if not suspension and execution is not None:
            ended = await self._completed(run_id, execution)
            if ended is not None and ended.status in statuses:
                return ended
        while True:
            info, seen, execution = await self._describe(run_id)
            if info.status in statuses:
                return info
            handle = self.client.get_workflow_handle(self.workflow_id(run_id), run_id=execution)
            with contextlib.suppress(RPCError):
                async for event in handle.fetch_history_events(
                    wait_new_event=True,
                    event_filter_type=(
                        WorkflowHistoryEventFilterType.ALL_EVENT
                        if suspension
                        else WorkflowHistoryEventFilterType.CLOSE_EVENT
                    ),
                ):
                    if event.event_id > seen and event.event_type in _CHANGES:
                        break

    async def _completed(self, run_id: str, execution: str) -> RunInfo | None:
        """The run's record as the result of ``execution`` (the one this process
        started), after one long poll for its close and no describe; None when it
        closed otherwise (the run parked or went on as new, Temporal ended it) or
        cannot be read: the caller then reads the run's memo."""
        handle = self.client.get_workflow_handle(self.workflow_id(run_id), run_id=execution)
        try:
            async for event in handle.fetch_history_events(
                wait_new_event=True,
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT,
            ):
                if not event.HasField("workflow_execution_completed_event_attributes"):
                    return None
                payloads = event.workflow_execution_completed_event_attributes.result.payloads
                [record] = await self.client.data_converter.decode(payloads)
                return await self.values.info(record)
        except (RPCError, CorruptHistoryError, SerializationError, KeyError, TypeError, ValueError):
            return None  # the memo, read next, names what is wrong
        return None

    async def idle(self) -> None:
        """Return once every run started here has stopped moving and no drive runs here."""
        for run_id in sorted(self._started):
            with contextlib.suppress(RunNotFoundError):
                await self._until(run_id, STILL)
            self._started.discard(run_id)
        drives = self._drives
        while drives is not None and drives.running:
            await asyncio.gather(*drives.running.values(), return_exceptions=True)

    async def serve(
        self,
        *,
        stop: asyncio.Event,
        concurrency: int = 100,
        queue: str | None = None,
        rate: float | None = None,
    ) -> None:
        """Be a Temporal worker on the task queue (``queue``, else the URL's): workflow
        tasks, and ``concurrency`` drives at a time; ``rate`` is the task queue's
        activity rate limit (drives started per second by all its workers together,
        which the server enforces; a drive runs a run up to its next wait, so this
        bounds runs started or resumed per second, not the model calls within one)."""
        if not registered_workflows():
            raise ConfigurationError(
                "this worker has no registered workflows; import the module that defines them"
            )
        if queue is not None and queue != self.config.task_queue:
            await self._move_to(queue)
        await self._ensure_drives(concurrency, rate)
        await stop.wait()

    async def _move_to(self, task_queue: str) -> None:
        """Serve ``task_queue`` instead of the URL's (before any run is driven here)."""
        await self.close()
        self.url = with_task_queue(self.url, task_queue)
        self.config = TemporalUrl.parse(self.url)
        self.values = Values(self.config, self.values.payloads)
        self.version = deployment_version(task_queue)
        await self.open()

    @property
    def drive_worker(self) -> Worker | None:
        """The Temporal worker running drives in this process, once there is one."""
        if self._drive_worker is not None:
            return self._drive_worker
        workflows = self._workflows
        return workflows.worker if workflows is not None and workflows.drives else None

    # -- acting on a run -----------------------------------------------------------------

    async def _update(self, run_id: str, name: str, arg: dict[str, Any]) -> Any:
        handle = self._handle(run_id)
        update_id = f"{name}-{time.time_ns()}"
        try:
            return await ride_out(
                f"{name} of run {run_id!r}",
                lambda: handle.execute_update(name, arg, id=update_id),
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == INVALID_STATE:
                raise InvalidRunStateError(cause.message) from None
            if isinstance(cause, ApplicationError) and cause.type == APPROVAL_NOT_PENDING:
                named = approvals.request_of(str(arg.get("name")))
                raise ApprovalNotPendingError(run_id, named, cause.message) from None
            raise
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise await self._absent(run_id) from None
            raise BackendUnavailableError(f"{name} of run {run_id!r}: {exc}") from exc

    async def _absent(self, run_id: str) -> Exception:
        """What a NOT_FOUND from an open-workflow call means: ended, or never was."""
        try:
            info = await self.get_run(run_id)
        except RunNotFoundError as exc:
            return exc
        return InvalidRunStateError(f"run {run_id!r} has ended ({info.status.value})")

    async def _signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> None:
        """An acknowledged signal (an update of the run's workflow): once this returns,
        the run's record shows it due. ``temporal workflow signal`` works as well."""
        await self.open()
        data = to_jsonable(payload, f"payload of signal {name!r} to run {run_id!r}")
        _, ref = await self.values.pack(data)
        arg = {
            "name": name,
            "payload": data if ref is None else None,
            "payload_ref": ref,
            "sent_by": by,
            "sent_at": time.time(),
            "decision": authorization,
        }
        await self._update(run_id, "deliver", arg)

    async def _cancel(self, run_id: str) -> RunInfo:
        await self.open()
        run = await self._update(run_id, "request_cancel", {"now": time.time()})
        return await self.values.info(run)

    async def _resume(
        self,
        run_id: str,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> RunInfo:
        await self.open()
        guards.check_can_resume(await self.get_run(run_id))
        resumed = events.resumed(by=by, authorization=authorization)
        return await self._admin_append(run_id, [resumed], expect=guards.RESUMABLE)

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
        await self.open()
        guards.check_can_reconcile(await self.get_run(run_id), step_key)
        verdict = events.reconciled(
            step_key, outcome, result=result, message=message, by=by, authorization=authorization
        )
        return await self._admin_append(run_id, [verdict], expect=guards.RECONCILABLE)

    async def _admin_append(
        self, run_id: str, records: list[NewEvent], *, expect: Sequence[RunStatus]
    ) -> RunInfo:
        arg = {
            "events": await self.values.new_events(records),
            "expect": [s.value for s in expect],
            "status": RunStatus.SUSPENDED.value,
            "now": time.time(),
        }
        return await self.values.info(await self._update(run_id, "admin_append", arg))


def _unreadable(run_id: str, wf: WorkflowExecution, exc: Exception) -> RunInfo:
    """A run whose record cannot be read, as a listing shows it: needing attention,
    reason ``corrupt``, with what visibility itself knows."""
    started = wf.start_time.timestamp()
    return RunInfo(
        run_id=run_id,
        workflow=wf.typed_search_attributes.get(WORKFLOW) or "?",
        status=RunStatus.NEEDS_ATTENTION,
        input=None,
        created_at=started,
        updated_at=started,
        attention={"reason": "corrupt", "message": str(exc)},
    )


def _quote(value: str) -> str:
    """A visibility-query string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
