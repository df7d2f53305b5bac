"""``perdure.drive``: the activity that runs perdure's replay engine for one run.

One attempt of a drive: ``begin`` (an update that admits this attempt and fences out
every earlier one), read the run's history from Temporal, replay it through the
workflow's code with the engine's own ``RunDriver`` — both framework adapters run
unchanged, outside any sandbox — and record each new step as one ``append`` update
fenced by this attempt. The attempt heartbeats; a worker that dies anywhere is a
heartbeat timeout, and Temporal runs the next attempt on any worker of the task queue.

A drive never fails the run for a transient reason: a Temporal state that does not pass
within the retry budget unwinds the drive (the engine's ``SubstrateFault``, which user
code cannot catch) and fails the attempt, so Temporal retries it on any worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from perdure.engine.driver import RunDriver
from perdure.engine.outages import SubstrateFault
from perdure.errors import Fault, LeaseLostError, classify
from perdure.records import Event, NewEvent, RunInfo, SignalRecord
from perdure.store import Lease, RunUpdate
from perdure.workflow import get_workflow
from perdure_temporal.codec import Values
from perdure_temporal.faults import is_transient, ride_out
from perdure_temporal.history import read_history
from perdure_temporal.workflow import DRIVE_ACTIVITY, INVALID_STATE, STALE_DRIVE

if TYPE_CHECKING:
    from perdure.engine.backend import EmbeddedBackend

log = logging.getLogger("perdure.temporal")


class _Stop(Exception):
    """The drive stopped at a step boundary so that the next drive goes on."""


class DriveStore:
    """What ``RunDriver`` asks of a store, for one drive attempt: the run and history
    read at ``begin``, signals from the inbox as it was then, and fenced appends."""

    def __init__(
        self,
        drives: Drives,
        run_id: str,
        info: RunInfo,
        rows: list[dict[str, Any]],
        signals: list[dict[str, Any]],
    ) -> None:
        self.drives = drives
        self.url = drives.url
        self.run_id = run_id
        self._info = info
        self._rows = rows
        self._signals = signals
        #: Set when the drive should stop before its next step (history full, worker
        #: draining); the step in hand still records.
        self.stopping = False
        #: Why the drive stopped without finishing, if it did.
        self.interrupted: BaseException | None = None
        self.last_step: str | None = None

    async def get_run(self, run_id: str) -> RunInfo:
        return self._info

    async def load_history(self, run_id: str) -> list[Event]:
        return await self.drives.values.events(run_id, self._rows)

    async def next_signal(self, run_id: str, name: str) -> SignalRecord | None:
        for rec in self._signals:
            if rec["name"] == name:
                payload: Any = rec.get("payload")
                if rec.get("payload_ref") is not None:
                    payload = await self.drives.values.unpack(
                        None, rec["payload_ref"], run_id, None, f"signal {name!r}"
                    )
                return SignalRecord(
                    int(rec["signal_id"]),
                    run_id,
                    name,
                    payload,
                    rec.get("sent_by"),
                    float(rec["sent_at"]),
                )
        return None

    def classify(self, exc: BaseException) -> Fault | None:
        """Temporal's passing states are transient (the drive fails, Temporal retries
        it); the rest as perdure classifies them."""
        return "transient" if is_transient(exc) else classify(exc)

    async def release(self, lease: Lease) -> None:
        """The drive stopped at a step boundary (drain, history full): the activity
        returns and the workflow schedules the next drive; nothing to give back."""
        self.interrupted = _Stop("stopped at a step boundary")

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
            "fence": lease.fence,
            "now": time.time(),
            "events": await self.drives.values.new_events(events),
            "consume_signal": consume_signal,
            "update": None,
        }
        if update is not None:
            text, ref = await self.drives.values.pack(update.result)
            arg["update"] = {
                "status": update.status.value,
                "result": text,
                "result_ref": ref,
                "error": update.error,
                "waiting_for": update.waiting_for,
                "wake_at": update.wake_at,
                "attention": update.attention,
            }
        handle = self.drives.client.get_workflow_handle(self.drives.workflow_id(self.run_id))
        # One id per record: a resend after a timed-out RPC is applied at most once.
        update_id = f"append-{lease.fence}-{lease.next_seq}"
        try:
            res: dict[str, Any] = await ride_out(
                f"append to run {self.run_id!r}",
                lambda: handle.execute_update("append", arg, id=update_id),
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type in (STALE_DRIVE, INVALID_STATE):
                raise LeaseLostError(cause.message) from None
            raise
        self._signals = [s for s in res.get("signals", ()) if s["signal_id"] != consume_signal]
        lease.next_seq = int(res["next_seq"])
        lease.cancel_requested = bool(res["cancel_requested"])
        self.last_step = next((e.step_key for e in reversed(events) if e.step_key), self.last_step)
        if res.get("history_full"):
            self.stopping = True  # the engine stops before the next step (``draining``)


@dataclass
class _Host:
    """The part of a backend ``RunDriver`` reads."""

    store: DriveStore
    url: str
    lease_seconds: float
    replay_only: bool = False

    @property
    def draining(self) -> bool:
        """Stop before the next step: the worker shuts down, or the history is full."""
        return self.store.stopping or self.store.drives.draining


class Drives:
    """The ``perdure.drive`` activity of one process, on that process's event loop."""

    def __init__(self, url: str, client: Client, values: Values) -> None:
        self.url = url
        self.client = client
        self.values = values
        self.config = values.config
        self.running: dict[str, asyncio.Task[Any]] = {}
        #: This process is shutting down: every drive stops before its next step.
        self.draining = False

    def workflow_id(self, run_id: str) -> str:
        return f"{self.config.id_prefix}{run_id}"

    @activity.defn(name=DRIVE_ACTIVITY)
    async def drive(self, arg: dict[str, Any]) -> dict[str, Any]:
        run_id = str(arg["run_id"])
        info = activity.info()
        handle = self.client.get_workflow_handle(self.workflow_id(run_id))
        begin_arg = {"drive": int(arg["drive"]), "attempt": info.attempt}
        try:
            begun: dict[str, Any] = await ride_out(
                f"begin of run {run_id!r}",
                lambda: handle.execute_update(
                    "begin", begin_arg, id=f"begin-{arg['drive']}-{info.attempt}"
                ),
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type in (STALE_DRIVE, INVALID_STATE):
                return {"stale": True}  # a later attempt, or the run's end, came first
            raise
        rows = await ride_out(
            f"history of run {run_id!r}",
            lambda: read_history(self.client, self.workflow_id(run_id)),
        )
        run_info = await self.values.info(begun["run"])
        store = DriveStore(self, run_id, run_info, rows, list(begun["signals"]))
        workflow = get_workflow(run_info.workflow)
        lease = Lease(
            run_id,
            f"{self.client.identity}#{arg['drive']}.{info.attempt}",
            int(begun["fence"]),
            int(begun["next_seq"]),
            bool(begun["run"].get("cancel_requested")),
        )
        host = _Host(store, self.url, float(self.config.heartbeat_timeout))
        driver = RunDriver(cast("EmbeddedBackend", host), lease, workflow)
        task = asyncio.get_running_loop().create_task(
            driver.drive(), name=f"perdure-drive-{run_id}"
        )
        self.running[run_id] = task
        beat = asyncio.get_running_loop().create_task(self._heartbeat(store))
        try:
            status = await self._await_drive(task, store)
        except SubstrateFault as fault:
            # Transient (a permanent one parked the run): this attempt fails, Temporal
            # runs the next after its backoff, on this worker or another.
            raise ApplicationError(
                f"drive of run {run_id!r}: Temporal is unavailable: {fault.error}",
                type="PerdureDriveInterrupted",
            ) from None
        finally:
            beat.cancel()
            with contextlib.suppress(BaseException):
                await beat
            if self.running.get(run_id) is task:
                del self.running[run_id]
        if status is None:
            if isinstance(store.interrupted, _Stop):
                return {"again": True}
            # A transient outage, or a later attempt took over: Temporal retries.
            raise ApplicationError(
                f"drive of run {run_id!r} stopped: {store.interrupted or 'superseded'}",
                type="PerdureDriveInterrupted",
            )
        return {"status": status.value}

    async def _await_drive(self, task: asyncio.Task[Any], store: DriveStore) -> Any:
        """The drive's result. A cancellation of the activity (its workflow closed or
        was reset, or the worker's drain period ran out) stops the drive at once."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            raise

    async def _heartbeat(self, store: DriveStore) -> None:
        """Heartbeat with the last recorded step; when the worker begins to shut down,
        let the drive finish the step in hand and stop at the next boundary (drain)."""
        period = max(float(self.config.heartbeat_timeout) / 4, 0.2)
        while True:
            activity.heartbeat(store.last_step)
            if activity.is_worker_shutdown():
                store.stopping = True
            await asyncio.sleep(min(period, 0.5) if not store.stopping else period)
