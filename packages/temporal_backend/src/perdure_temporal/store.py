"""``TemporalStore``: perdure's storage contract kept by a Temporal cluster.

Each run is one ``perdure.run`` workflow (``journal.py``) whose id is the run id (after
the URL's ``id_prefix``). Every write is a Temporal update — one append per step,
fenced by the workflow's update validator — so Temporal's event history is the run's
durable record, and any worker on the task queue can replay it. Reads are queries;
finding due runs and listing runs go through Temporal visibility (search attributes
``PerdureStatus``, ``PerdureWorkflow``, ``PerdureDueAt``).

Every process that opens the store runs a small Temporal worker for the journal
workflow on the URL's task queue: that is what applies the updates, and why a CLI
process can approve a run whose driver is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
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

from perdure.errors import (
    BackendUnavailableError,
    CorruptHistoryError,
    InvalidRunStateError,
    LeaseLostError,
    RunNotFoundError,
)
from perdure.records import Event, EventKind, NewEvent, RunInfo, RunStatus, SignalRecord
from perdure.store import Lease, NewRun, RunUpdate, Store
from perdure_temporal.faults import is_transient, ride_out
from perdure_temporal.journal import (
    DUE_AT,
    INVALID_STATE,
    LEASE_LOST,
    NEVER,
    SEARCH_ATTRIBUTES,
    STATUS,
    TASK_TIMEOUT,
    WORKFLOW,
    WORKFLOW_TYPE,
    PerdureRun,
)
from perdure_temporal.payloads import DirectoryPayloads, PayloadStore
from perdure_temporal.url import TemporalUrl
from perdure_temporal.worker import JournalWorker

log = logging.getLogger("perdure.temporal")

_T = TypeVar("_T")

#: Queries and updates in flight at once when a listing reads many runs.
_FAN_OUT = 32

#: How long each attempt of a query waits for a worker. A query can be lost with the
#: worker it was routed to (SIGKILLed), or while a workflow task is in flight; each
#: retry resets the run's stickiness, and later attempts allow a replay of a long history.
QUERY_TIMEOUTS = tuple(timedelta(seconds=s) for s in (2, 2, 4, 8, 16, 30))


class TemporalStore(Store):
    """Runs as ``perdure.run`` workflows on the namespace and task queue of ``url``."""

    def __init__(self, url: str, *, payloads: PayloadStore | None = None) -> None:
        self.url = url
        self.config = TemporalUrl.parse(url)
        self.payloads = payloads or DirectoryPayloads(self.config.payloads)
        self._client: Client | None = None
        self._worker: JournalWorker | None = None
        self._held: dict[str, set[str]] = {}

    # -- connection ----------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            raise BackendUnavailableError(f"{self.url}: the store is not open")
        return self._client

    async def open(self) -> None:
        if self._client is not None:
            return
        cfg = self.config
        try:
            client = await asyncio.wait_for(
                Client.connect(cfg.target, namespace=cfg.namespace), timeout=15
            )
            await _ensure_search_attributes(client, cfg.namespace)
        except (RuntimeError, RPCError, TimeoutError, OSError) as exc:
            raise BackendUnavailableError(
                f"Temporal at {cfg.target} (namespace {cfg.namespace!r}) is unavailable: {exc}"
            ) from exc
        worker = JournalWorker(cfg.target, cfg.namespace, cfg.task_queue)
        await asyncio.to_thread(worker.start)
        self._client = client
        self._worker = worker

    async def close(self) -> None:
        worker = self._worker
        self._client = self._worker = None
        if worker is not None:
            await asyncio.to_thread(worker.stop)

    def workflow_id(self, run_id: str) -> str:
        return f"{self.config.id_prefix}{run_id}"

    def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(self.workflow_id(run_id))

    # -- payloads ------------------------------------------------------------------------

    async def _pack(self, value: Any) -> tuple[str | None, str | None]:
        """``(json, None)`` inline, or ``(None, key)`` when stored aside."""
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        data = text.encode()
        if len(data) <= self.config.payload_threshold:
            return text, None
        return None, await asyncio.to_thread(self.payloads.put, data)

    async def _unpack(
        self, text: str | None, ref: str | None, run_id: str, seq: int | None, what: str
    ) -> Any:
        if ref is not None:
            try:
                raw = await asyncio.to_thread(self.payloads.get, ref)
            except KeyError:
                raise CorruptHistoryError(
                    run_id, seq, f"{what} stored aside as {ref} is missing from {self.payloads}"
                ) from None
            try:
                text = raw.decode()
            except UnicodeDecodeError as exc:
                raise CorruptHistoryError(run_id, seq, f"{what} is not UTF-8: {exc}") from None
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CorruptHistoryError(run_id, seq, f"{what} is not valid JSON: {exc}") from None

    async def _new_events(self, events: Sequence[NewEvent]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ev in events:
            text, ref = await self._pack(ev.data)
            out.append(
                {
                    "kind": ev.kind.value,
                    "step_key": ev.step_key,
                    "name": ev.name,
                    "data": text,
                    "data_ref": ref,
                }
            )
        return out

    async def _info(self, run: dict[str, Any]) -> RunInfo:
        run_id = str(run["run_id"])
        try:
            status = RunStatus(run["status"])
        except ValueError:
            raise CorruptHistoryError(run_id, None, f"unknown status {run['status']!r}") from None
        return RunInfo(
            run_id=run_id,
            workflow=run["workflow"],
            status=status,
            input=await self._unpack(run["input"], run.get("input_ref"), run_id, None, "input"),
            created_at=float(run["created_at"]),
            updated_at=float(run["updated_at"]),
            code_version=run["code_version"],
            result=await self._unpack(
                run.get("result"), run.get("result_ref"), run_id, None, "result"
            ),
            error=run.get("error"),
            owner=run.get("owner"),
            lease_until=run.get("lease_until"),
            fence=int(run["fence"]),
            cancel_requested=bool(run.get("cancel_requested")),
            waiting_for=run.get("waiting_for"),
            wake_at=run.get("wake_at"),
            attention=run.get("attention"),
            parent_run_id=run.get("parent_run_id"),
            details={
                **(run.get("details") or {}),
                "temporal": {
                    "workflow_id": self.workflow_id(run_id),
                    "namespace": self.config.namespace,
                    "task_queue": self.config.task_queue,
                },
            },
        )

    # -- calls ---------------------------------------------------------------------------

    async def _call(self, run_id: str, make: Callable[[], Awaitable[_T]]) -> _T:
        """Run a query or update of ``run_id``, mapping Temporal's errors onto perdure's."""
        try:
            return await make()
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type == LEASE_LOST:
                raise LeaseLostError(cause.message) from None
            if isinstance(cause, ApplicationError) and cause.type == INVALID_STATE:
                raise InvalidRunStateError(cause.message) from None
            raise
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                missing = await self._not_found(run_id)
                if isinstance(missing, _StillRunning):
                    raise BackendUnavailableError(f"run {run_id!r}: {exc}") from exc
                raise missing from None
            if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                raise BackendUnavailableError(
                    f"Temporal at {self.config.target} is unavailable: {exc}"
                ) from exc
            raise
        except WorkflowQueryFailedError as exc:
            raise BackendUnavailableError(f"query of run {run_id!r} failed: {exc}") from exc

    async def _not_found(self, run_id: str) -> Exception:
        """A call found no open workflow: the run is missing, or it has ended (or, for
        a query, the worker it was routed to is gone: ``_StillRunning``)."""
        try:
            desc = await self._handle(run_id).describe()
        except RPCError:
            return RunNotFoundError(run_id)
        if desc.status == WorkflowExecutionStatus.RUNNING:
            return _StillRunning(run_id)
        return InvalidRunStateError(f"run {run_id!r} has ended (workflow {desc.status})")

    async def _update(self, run_id: str, name: str, arg: dict[str, Any]) -> Any:
        handle = self._handle(run_id)
        # One id for every resend: Temporal applies an update id at most once, so an
        # update whose RPC timed out after it was applied is not applied twice.
        update_id = uuid.uuid4().hex

        async def execute() -> Any:
            return await ride_out(
                f"{name} of run {run_id!r}",
                lambda: handle.execute_update(name, arg, id=update_id),
            )

        async def send() -> Any:
            for _ in range(4):
                try:
                    return await execute()
                except RPCError as exc:
                    # The execution closed under the update (it continued as new): the
                    # update did not apply there; send it to the one now running.
                    if exc.status != RPCStatusCode.NOT_FOUND or not isinstance(
                        await self._not_found(run_id), _StillRunning
                    ):
                        raise
            return await execute()

        return await self._call(run_id, send)

    async def _query(self, run_id: str, query: Any, *args: Any) -> Any:
        """A query of ``run_id``. Temporal sends it to the worker that last ran the
        workflow; when that worker was SIGKILLed the query waits for nobody, so after a
        short wait the run's stickiness is reset and any live worker answers."""
        handle = self._handle(run_id)

        async def ask() -> Any:
            for timeout in QUERY_TIMEOUTS:
                # wait_for, not rpc_timeout: the client retries a timed-out query itself.
                try:
                    return await asyncio.wait_for(
                        handle.query(query, *args), timeout.total_seconds()
                    )
                except TimeoutError:
                    why = f"no answer in {timeout.total_seconds():g}s"
                except WorkflowQueryFailedError as exc:
                    # "Workflow Task in failed state": its task is being retried.
                    if not is_transient(exc):
                        raise
                    why = str(exc)
                except RPCError as exc:
                    if exc.status == RPCStatusCode.NOT_FOUND:
                        # Also what Temporal answers when the sticky worker is gone.
                        missing = await self._not_found(run_id)
                        if not isinstance(missing, _StillRunning):
                            raise missing from None
                    elif not is_transient(exc):
                        raise
                    why = f"{exc.status.name}: {exc.message}"
                log.debug("query of run %s failed (%s); resetting stickiness", run_id, why)
                with contextlib.suppress(RPCError):
                    await self.client.workflow_service.reset_sticky_task_queue(
                        ResetStickyTaskQueueRequest(
                            namespace=self.config.namespace,
                            execution=WorkflowExecution(workflow_id=self.workflow_id(run_id)),
                        )
                    )
            raise BackendUnavailableError(
                f"no worker answered a query of run {run_id!r} on task queue "
                f"{self.config.task_queue!r} in {sum(t.total_seconds() for t in QUERY_TIMEOUTS):g}s"
            )

        return await self._call(run_id, ask)

    async def _run(self, run_id: str) -> dict[str, Any]:
        try:
            run: dict[str, Any] = await self._query(run_id, PerdureRun.info)
        except InvalidRunStateError:
            # The workflow has closed: its result is the final record (no replay needed).
            handle = self._handle(run_id)
            run = await self._call(run_id, lambda: handle.result())
        return run

    async def _journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's history rows, read from Temporal's event history itself: the start
        event, then the events of every append that completed, in order, across the
        executions a long run continued as new into. No worker is involved, so a
        finished or long run is read without replaying it."""
        wid = self.workflow_id(run_id)

        async def read() -> list[dict[str, Any]]:
            return await read_history(self.client, wid)

        return await self._call(run_id, read)

    def _hold(self, owner: str, run_id: str) -> None:
        self._held.setdefault(owner, set()).add(run_id)

    def _drop(self, owner: str, run_id: str) -> None:
        self._held.get(owner, set()).discard(run_id)

    # -- Store -----------------------------------------------------------------------------

    async def create_run(
        self, new: NewRun, owner: str, lease_seconds: float
    ) -> tuple[RunInfo, Lease | None]:
        now = time.time()
        text, ref = await self._pack(new.input)
        run: dict[str, Any] = {
            "run_id": new.run_id,
            "workflow": new.workflow,
            "status": RunStatus.RUNNING.value,
            "input": text,
            "input_ref": ref,
            "created_at": now,
            "updated_at": now,
            "code_version": new.code_version,
            "result": None,
            "result_ref": None,
            "error": None,
            "owner": owner,
            "lease_until": now + lease_seconds,
            "fence": 1,
            "cancel_requested": False,
            "waiting_for": None,
            "wake_at": None,
            "attention": None,
            "parent_run_id": new.parent_run_id,
            "details": dict(new.details),
        }
        event = {
            "seq": 0,
            "kind": EventKind.RUN_STARTED.value,
            "at": now,
            "step_key": None,
            "name": None,
            "data": text,
            "data_ref": ref,
        }
        try:
            await ride_out(
                f"start of run {new.run_id!r}",
                lambda: self.client.start_workflow(
                    PerdureRun.main,
                    {"run": run, "event": event, "history_limit": self.config.history_limit},
                    id=self.workflow_id(new.run_id),
                    task_queue=self.config.task_queue,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                    task_timeout=TASK_TIMEOUT,
                    search_attributes=TypedSearchAttributes(
                        [
                            SearchAttributePair(STATUS, RunStatus.RUNNING.value),
                            SearchAttributePair(WORKFLOW, new.workflow),
                            SearchAttributePair(DUE_AT, now + lease_seconds),
                        ]
                    ),
                ),
            )
        except WorkflowAlreadyStartedError:
            return await self.get_run(new.run_id), None
        except RPCError as exc:
            raise BackendUnavailableError(f"could not start run {new.run_id!r}: {exc}") from exc
        self._hold(owner, new.run_id)
        return await self._info(run), Lease(new.run_id, owner, 1, 1)

    async def get_run(self, run_id: str) -> RunInfo:
        return await self._info(await self._run(run_id))

    async def _ids(self, query: str, limit: int) -> list[str]:
        prefix = self.config.id_prefix
        ids: list[str] = []
        async for wf in self.client.list_workflows(query, limit=limit):
            if wf.id.startswith(prefix):
                ids.append(wf.id[len(prefix) :])
        return ids

    def _base_query(self) -> str:
        return f"WorkflowType = '{WORKFLOW_TYPE}' AND TaskQueue = '{self.config.task_queue}'"

    async def _gather(self, ids: Sequence[str], fn: Callable[[str], Awaitable[_T]]) -> list[_T]:
        gate = asyncio.Semaphore(_FAN_OUT)

        async def one(run_id: str) -> _T:
            async with gate:
                return await fn(run_id)

        return await asyncio.gather(*(one(i) for i in ids))

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        updated_before: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
        candidates: str | None = None,
    ) -> list[RunInfo]:
        """Runs newest first. Visibility names the candidates (``candidates`` narrows
        them further with a visibility filter); each is then read exactly, so a status
        changed a moment ago is filtered on its current value."""
        query = self._base_query()
        if workflow is not None:
            query += f" AND PerdureWorkflow = {_quote(workflow)}"
        if candidates:
            query += f" AND {candidates}"
        ids = await self._ids(query, limit=10_000)

        async def read(run_id: str) -> RunInfo | None:
            try:
                return await self.get_run(run_id)
            except RunNotFoundError:
                return None

        out = [
            info
            for info in await self._gather(ids, read)
            if info is not None
            and (statuses is None or info.status in statuses)
            and (updated_before is None or info.updated_at < updated_before)
            and (workflow is None or info.workflow == workflow)
        ]
        out.sort(key=lambda r: r.created_at, reverse=True)
        return out[:limit]

    async def load_history(self, run_id: str) -> list[Event]:
        rows = await self._journal(run_id)
        events: list[Event] = []
        for row in rows:
            seq = int(row["seq"])
            try:
                kind = EventKind(row["kind"])
            except ValueError:
                raise CorruptHistoryError(
                    run_id, seq, f"unknown event kind {row['kind']!r}"
                ) from None
            data = await self._unpack(row.get("data"), row.get("data_ref"), run_id, seq, "data")
            events.append(
                Event(run_id, seq, kind, float(row["at"]), row["step_key"], row["name"], data)
            )
        return events

    async def append(
        self,
        lease: Lease,
        events: Sequence[NewEvent],
        *,
        lease_seconds: float,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        arg: dict[str, Any] = {
            "owner": lease.owner,
            "fence": lease.fence,
            "now": time.time(),
            "lease_seconds": lease_seconds,
            "events": await self._new_events(events),
            "consume_signal": consume_signal,
            "update": None,
        }
        if update is not None:
            text, ref = await self._pack(update.result)
            arg["update"] = {
                "status": update.status.value,
                "result": text,
                "result_ref": ref,
                "error": update.error,
                "waiting_for": update.waiting_for,
                "wake_at": update.wake_at,
                "attention": update.attention,
            }
        try:
            res = await self._update(lease.run_id, "append", arg)
        except LeaseLostError:
            self._drop(lease.owner, lease.run_id)
            raise
        lease.next_seq = int(res["next_seq"])
        lease.cancel_requested = bool(res["cancel_requested"])
        if update is not None:
            self._drop(lease.owner, lease.run_id)

    async def acquire(
        self,
        run_id: str,
        owner: str,
        lease_seconds: float,
        *,
        now: float,
        break_owner: str | None = None,
    ) -> Lease | None:
        arg = {
            "owner": owner,
            "lease_seconds": lease_seconds,
            "now": now,
            "break_owner": break_owner,
        }
        try:
            res = await self._update(run_id, "acquire", arg)
        except InvalidRunStateError:
            return None  # it ended meanwhile
        if res is None:
            return None
        self._hold(owner, run_id)
        return Lease(
            run_id, owner, int(res["fence"]), int(res["next_seq"]), bool(res["cancel_requested"])
        )

    async def claim_due(
        self, owner: str, lease_seconds: float, *, now: float, workflows: Sequence[str], limit: int
    ) -> list[Lease]:
        if not workflows or limit <= 0:
            return []
        names = ", ".join(_quote(w) for w in workflows)
        query = (
            f"{self._base_query()} AND ExecutionStatus = 'Running' "
            f"AND PerdureWorkflow IN ({names}) AND PerdureDueAt <= {now!r}"
        )
        leases: list[Lease] = []
        for run_id in await self._ids(query, limit=limit * 4):
            if len(leases) >= limit:
                break
            with contextlib.suppress(RunNotFoundError):
                lease = await self.acquire(run_id, owner, lease_seconds, now=now)
                if lease is not None:
                    leases.append(lease)
        return leases

    async def next_wake(self, workflows: Sequence[str]) -> float | None:
        if not workflows:
            return None
        names = ", ".join(_quote(w) for w in workflows)
        query = (
            f"{self._base_query()} AND ExecutionStatus = 'Running' "
            f"AND PerdureWorkflow IN ({names}) AND PerdureStatus = 'suspended' "
            f"AND PerdureDueAt < {NEVER!r}"
        )
        wakes: list[float] = []
        async for wf in self.client.list_workflows(query, limit=1000):
            due = wf.typed_search_attributes.get(DUE_AT)
            if due is not None:
                wakes.append(due)
        return min(wakes) if wakes else None

    async def renew(self, owner: str, lease_seconds: float, *, now: float) -> None:
        arg = {"owner": owner, "lease_seconds": lease_seconds, "now": now}

        async def one(run_id: str) -> None:
            try:
                await self._update(run_id, "renew", arg)
            except (RunNotFoundError, InvalidRunStateError):
                self._drop(owner, run_id)

        await self._gather(sorted(self._held.get(owner, ())), one)

    async def release(self, lease: Lease) -> None:
        self._drop(lease.owner, lease.run_id)
        arg = {"owner": lease.owner, "fence": lease.fence}
        with contextlib.suppress(InvalidRunStateError):
            await self._update(lease.run_id, "release", arg)

    async def deliver_signal(
        self, run_id: str, name: str, payload: Any, sent_by: str | None, *, now: float
    ) -> SignalRecord:
        text, ref = await self._pack(payload)
        arg = {"name": name, "payload": text, "payload_ref": ref, "sent_by": sent_by, "now": now}
        rec = await self._update(run_id, "deliver_signal", arg)
        return SignalRecord(int(rec["signal_id"]), run_id, name, payload, sent_by, now)

    async def next_signal(self, run_id: str, name: str) -> SignalRecord | None:
        rec: dict[str, Any] | None = await self._query(run_id, PerdureRun.next_signal, name)
        if rec is None:
            return None
        payload = await self._unpack(
            rec.get("payload"), rec.get("payload_ref"), run_id, None, f"signal {name!r}"
        )
        return SignalRecord(
            int(rec["signal_id"]),
            run_id,
            name,
            payload,
            rec.get("sent_by"),
            float(rec["sent_at"]),
        )

    async def request_cancel(self, run_id: str, *, now: float) -> RunInfo:
        return await self._info(await self._update(run_id, "request_cancel", {"now": now}))

    async def admin_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expect: Sequence[RunStatus],
        status: RunStatus,
        now: float,
    ) -> RunInfo:
        arg = {
            "events": await self._new_events(events),
            "expect": [s.value for s in expect],
            "status": status.value,
            "now": now,
        }
        return await self._info(await self._update(run_id, "admin_append", arg))


async def read_history(client: Client, workflow_id: str) -> list[dict[str, Any]]:
    """A run's history rows, numbered, across the executions it continued as new into."""
    executions: list[list[dict[str, Any]]] = []
    execution: str | None = None  # the latest first, then each predecessor
    while True:
        rows, execution = await _read_execution(client, workflow_id, execution)
        executions.append(rows)
        if execution is None:
            break
    out: list[dict[str, Any]] = []
    for rows in reversed(executions):
        for row in rows:
            out.append({**row, "seq": len(out)})
    return out


async def _read_execution(
    client: Client, workflow_id: str, execution: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """The history rows one execution of a run's workflow added, and the execution it
    continued from (None for the first)."""
    handle = client.get_workflow_handle(workflow_id, run_id=execution)
    convert = client.data_converter
    rows: list[dict[str, Any]] = []
    previous: str | None = None
    accepted: dict[str, tuple[list[dict[str, Any]], float]] = {}
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            attrs = event.workflow_execution_started_event_attributes
            previous = attrs.continued_execution_run_id or None
            [start] = await convert.decode(attrs.input.payloads)
            if start.get("event") is not None:
                rows.append(start["event"])
        elif event.HasField("workflow_execution_update_accepted_event_attributes"):
            update = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if update.input.name in ("append", "admin_append"):
                [arg] = await convert.decode(update.input.args.payloads)
                accepted[update.meta.update_id] = (arg["events"], float(arg["now"]))
        elif event.HasField("workflow_execution_update_completed_event_attributes"):
            done = event.workflow_execution_update_completed_event_attributes
            appended = accepted.pop(done.meta.update_id, None)
            if appended is not None and done.outcome.HasField("success"):
                events, at = appended
                rows.extend({**ev, "at": at} for ev in events)
    return rows, previous


class _StillRunning(Exception):
    """A call said NOT_FOUND but the run's workflow is open: retry it."""


def _quote(value: str) -> str:
    """A visibility-query string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def _ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register perdure's search attributes on the namespace if they are missing."""
    have = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {
        key.name: IndexedValueType.ValueType(key.indexed_value_type)
        for key in SEARCH_ATTRIBUTES
        if key.name not in have.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
