"""``perdure.drive``: the activity that runs perdure's semantics for one run.

One attempt of a drive: ``begin`` (an update that admits this attempt and fences out
every earlier one), read the run's history from Temporal, and run
``perdure.spi.drive`` on a ``DriveJournal`` — both framework adapters run
unchanged, outside any sandbox — whose every append is one ``append`` update fenced by
this attempt, except the last (the run's stop), which is the attempt's result. The
attempt heartbeats; a worker that dies anywhere is a heartbeat timeout, and Temporal
runs the next attempt on any worker of the task queue.

A step that ran but whose record did not land (the append failed, or the worker died
while it was in flight) is not lost with the attempt: its completion travels in the
attempt's heartbeat details, which Temporal hands to the next attempt on whichever
worker, and that attempt records it instead of running the step again. A completion
that never reached Temporal is re-driven by the step's own rules (a pure step or a
deduplicating receiver runs again with the same key; a non-idempotent effect parks).

A drive never fails the run for a transient reason: a Temporal state that does not pass
within the retry budget fails the attempt, and Temporal retries it on any worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from perdure.spi import (
    RUN_CANCELLED,
    CorruptHistoryError,
    Drained,
    EventKind,
    LeaseLostError,
    NewEvent,
    PerdureError,
    RunInfo,
    RunUpdate,
    SignalRecord,
    SubstrateError,
    classify,
    drive,
    get_workflow,
    park_broken,
)
from perdure_temporal.attempt import INTERRUPTED, Attempt, relay
from perdure_temporal.codec import Values
from perdure_temporal.faults import is_transient, ride_out
from perdure_temporal.history import read_history
from perdure_temporal.workflow import DRIVE_ACTIVITY, INVALID_STATE, STALE_DRIVE

log = logging.getLogger("perdure.temporal")

#: Seconds a timed-out attempt, still alive, may take to finish the step in hand.
ZOMBIE_GRACE = 30.0


class DriveJournal:
    """The ``perdure.spi.Journal`` of one drive attempt: fenced ``append``
    updates to the run's workflow, and its inbox as ``begin`` and each append saw it."""

    def __init__(
        self,
        drives: Drives,
        attempt: Attempt,
        handle: WorkflowHandle[Any, Any],
        run_id: str,
        begun: dict[str, Any],
    ) -> None:
        self.drives = drives
        self.attempt = attempt
        self.handle = handle
        self._run_id = run_id
        #: The run as the drive began it (set once its history is read).
        self.info: RunInfo | None = None
        self.fence = int(begun["fence"])
        self.next_seq = int(begun["next_seq"])
        self._cancel = bool(begun["run"].get("cancel_requested"))
        self._signals: list[dict[str, Any]] = list(begun["signals"])
        #: Set when the drive should stop before its next step (history full, worker
        #: draining); the step in hand still records.
        self.stopping = False
        self.last_step: str | None = None
        #: Completions sent in an append that has not been acknowledged (as packed for
        #: the update): the heartbeat carries them to the next attempt.
        self.unrecorded: list[dict[str, Any]] = []
        #: The drive's last record (with its ``RunUpdate``): it travels as the
        #: attempt's result, which only the attempt Temporal still runs can deliver.
        self.last_record: dict[str, Any] | None = None
        self.execution = attempt.info.workflow_run_id

    # -- Journal ---------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def url(self) -> str:
        return self.drives.url

    @property
    def cancel_requested(self) -> bool:
        return self._cancel

    def run_cancelled(self) -> None:
        """The run was cancelled while this drive ran (the activity's cancellation)."""
        self._cancel = True

    @property
    def draining(self) -> bool:
        """Stop before the next step: the worker shuts down, or the history is full."""
        return self.stopping or self.drives.draining

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        values = self.drives.values
        packed = await values.new_events(events)
        arg: dict[str, Any] = {
            "fence": self.fence,
            "now": time.time(),
            "events": packed,
            "consume_signal": consume_signal,
            "update": None,
        }
        if update is not None:
            text, ref = await values.pack(update.result)
            arg["update"] = {
                "status": update.status.value,
                "result": text,
                "result_ref": ref,
                "error": update.error,
                "waiting_for": update.waiting_for,
                "wake_at": update.wake_at,
                "attention": update.attention,
            }
            # The drive ends here (``Journal.append``): no update; the activity's
            # result records it. A crash before then re-derives it from the history.
            self.last_record = arg
            return
        # Until acknowledged, the heartbeats carry the completions to the next attempt.
        self.unrecorded = [e for e in packed if e["kind"] == EventKind.STEP_COMPLETED.value]
        # One id per record: a resend after a timed-out RPC is applied at most once. The
        # execution is part of it: a reset reapplies the updates of the execution it
        # was reset from, under their ids, to the new one.
        update_id = f"append-{self.execution}-{self.fence}-{self.next_seq}"
        late = [p for e, p in zip(events, packed, strict=True) if _effect_outcome(e)]
        try:
            res: dict[str, Any] = await ride_out(
                f"append to run {self.run_id!r}",
                lambda: self.handle.execute_update("append", arg, id=update_id),
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type in (STALE_DRIVE, INVALID_STATE):
                if late:
                    await self._hand_over(late)
                raise LeaseLostError(cause.message) from None
            raise
        except asyncio.CancelledError:
            # Temporal cancels an attempt it timed out (its worker stalled) when the
            # attempt next heartbeats; the effect's outcome in hand still gets there.
            if late:
                await asyncio.shield(self._hand_over(late))
            raise
        self.unrecorded = []
        self._signals = [s for s in res.get("signals", ()) if s["signal_id"] != consume_signal]
        self.next_seq = int(res["next_seq"])
        # Sticky: an answer computed before the workflow took a cancel must not undo the
        # activity cancellation this drive already received (``run_cancelled``).
        self._cancel = self._cancel or bool(res["cancel_requested"])
        self.last_step = next((e.step_key for e in reversed(events) if e.step_key), self.last_step)
        if res.get("history_full"):
            self.stopping = True  # the semantics stop before the next step (``draining``)

    async def _hand_over(self, outcomes: list[dict[str, Any]]) -> None:
        """Give the outcomes of effects this fenced-out attempt ran to the run's next
        drive (``late_outcome``), so it records them rather than park the run on their
        intents. Best effort: if it fails, the run parks and an operator reconciles."""
        update_id = f"late-{self.execution}-{self.fence}-{self.next_seq}"
        try:
            await asyncio.wait_for(
                self.handle.execute_update("late_outcome", {"events": outcomes}, id=update_id),
                timeout=float(self.drives.config.heartbeat_timeout),
            )
        except Exception as exc:
            log.warning("run %s: a late outcome did not reach the run: %s", self.run_id, exc)

    async def next_signal(self, name: str) -> SignalRecord | None:
        for rec in self._signals:
            if rec["name"] == name:
                payload: Any = rec.get("payload")
                if rec.get("payload_ref") is not None:
                    payload = await self.drives.values.unpack(
                        None, rec["payload_ref"], self.run_id, None, f"signal {name!r}"
                    )
                return SignalRecord(
                    int(rec["signal_id"]),
                    self.run_id,
                    name,
                    payload,
                    rec.get("sent_by"),
                    float(rec["sent_at"]),
                    rec.get("decision"),
                )
        return None

    # -- heartbeats ------------------------------------------------------------------

    def heartbeat(self) -> None:
        """The last recorded step, and the completions not yet acknowledged."""
        self.attempt.heartbeat({"step": self.last_step, "unrecorded": self.unrecorded})


async def carried_from(
    values: Values, run_id: str, rows: Sequence[dict[str, Any]]
) -> dict[str, NewEvent]:
    """The completions an earlier attempt ran but may not have recorded (``unrecorded``
    of its last heartbeat), by step key. Replay prefers what the history holds."""
    out: dict[str, NewEvent] = {}
    for row in rows:
        data = await values.unpack(
            row.get("data"), row.get("data_ref"), run_id, None, f"completion of {row['step_key']!r}"
        )
        out[str(row["step_key"])] = NewEvent(
            EventKind(row["kind"]), row["step_key"], row.get("name"), data
        )
    return out


class Drives:
    """The ``perdure.drive`` activity of one process. Whichever loop its Temporal worker
    polls on, drives run on the loop that built this (the application's; ``relay``)."""

    def __init__(self, url: str, client: Client, values: Values) -> None:
        self.loop = asyncio.get_running_loop()
        self.url = url
        self.client = client
        self.values = values
        self.config = values.config
        self.running: dict[str, asyncio.Task[Any]] = {}
        #: This process is shutting down: every drive stops before its next step.
        self.draining = False
        #: By run: the ``CancelledError`` its own code (a session, a tool) raised in the
        #: last drive here, for a caller's ``wait`` to raise, as on every backend.
        self._raised: dict[str, asyncio.Future[asyncio.CancelledError]] = {}
        #: By run: how many ``wait()`` calls of this process watch its ``_raised``.
        self._watchers: Counter[str] = Counter()

    def raised(self, run_id: str) -> asyncio.Future[asyncio.CancelledError]:
        """Resolved with the ``CancelledError`` the run's own code raises in a drive here."""
        future = self._raised.get(run_id)
        if future is None:
            future = self._raised[run_id] = asyncio.get_running_loop().create_future()
        return future

    @contextlib.contextmanager
    def watching(self, run_id: str) -> Iterator[asyncio.Future[asyncio.CancelledError]]:
        """``raised(run_id)`` for one waiter. When the last waiter of a run leaves
        before any drive here raised for it (its ``wait()`` timed out, or was
        cancelled), the future goes: otherwise one entry per waited-on run stays for
        the life of the process."""
        future = self.raised(run_id)
        self._watchers[run_id] += 1
        try:
            yield future
        finally:
            self._watchers[run_id] -= 1
            if not self._watchers[run_id]:
                del self._watchers[run_id]
                if not future.done() and self._raised.get(run_id) is future:
                    del self._raised[run_id]

    def forget_raised(self, run_id: str) -> None:
        """The run stopped: no drive here will raise for it."""
        self._raised.pop(run_id, None)

    def workflow_id(self, run_id: str) -> str:
        return f"{self.config.id_prefix}{run_id}"

    @activity.defn(name=DRIVE_ACTIVITY)
    async def drive(self, arg: dict[str, Any]) -> dict[str, Any]:
        return await relay(self.loop, lambda attempt: self._attempt(attempt, arg))

    async def _attempt(self, attempt: Attempt, arg: dict[str, Any]) -> dict[str, Any]:
        """One attempt of the drive activity, on this process's loop."""
        run_id = str(arg["run_id"])
        info = attempt.info
        handle = self.client.get_workflow_handle(self.workflow_id(run_id))
        begun: dict[str, Any] | None = arg.get("begun") if info.attempt == 1 else None
        if begun is None:  # a retry: fence out every earlier attempt first
            begin_arg = {"drive": int(arg["drive"]), "attempt": info.attempt}
            try:
                begun = await ride_out(
                    f"begin of run {run_id!r}",
                    lambda: handle.execute_update(
                        "begin",
                        begin_arg,
                        id=f"begin-{info.workflow_run_id}-{arg['drive']}-{info.attempt}",
                    ),
                )
            except WorkflowUpdateFailedError as exc:
                cause = exc.cause
                if isinstance(cause, ApplicationError) and cause.type in (
                    STALE_DRIVE,
                    INVALID_STATE,
                ):
                    return {"stale": True}  # a later attempt, or the run's end, came first
                raise
        assert begun is not None
        if run_id in self._raised and self._raised[run_id].done():
            del self._raised[run_id]  # told; this drive may go otherwise
        journal = DriveJournal(self, attempt, handle, run_id, begun)
        # Kept in this attempt's heartbeats until an append lands (a second crash).
        journal.unrecorded = _unrecorded(info.heartbeat_details)
        # ... and the outcomes fenced-out attempts handed over (``late_outcome``).
        handed = [row for row in begun.get("late") or () if isinstance(row, dict)]
        carried = await carried_from(self.values, run_id, [*journal.unrecorded, *handed])
        # The task copies this attempt's context, which holds no run.
        task = asyncio.get_running_loop().create_task(
            self._drive(journal, begun, carried), name=f"perdure-drive-{run_id}"
        )
        self.running[run_id] = task
        beat = asyncio.get_running_loop().create_task(self._heartbeat(journal))
        try:
            return await self._await_drive(journal, task)
        finally:
            beat.cancel()
            with contextlib.suppress(BaseException):
                await beat
            if self.running.get(run_id) is task:
                del self.running[run_id]

    async def _drive(
        self, journal: DriveJournal, begun: dict[str, Any], carried: dict[str, NewEvent]
    ) -> dict[str, Any]:
        """One attempt, to the run's next stop; what the workflow does next."""
        run_id = journal.run_id
        try:
            rows: list[dict[str, Any]] | None = begun.get("history")
            if rows is None:
                rows = await ride_out(
                    f"history of run {run_id!r}",
                    lambda: read_history(self.client, self.workflow_id(run_id)),
                )
            history = await self.values.events(run_id, rows)
            if not history or history[0].kind is not EventKind.RUN_STARTED:
                raise CorruptHistoryError(run_id, 0, "the history does not begin with run_started")
            # The input is the run's first event (the record leaves it out).
            journal.info = await self.values.info(
                {**begun["run"], "input": rows[0].get("data"), "input_ref": rows[0].get("data_ref")}
            )
        except Exception as exc:
            if _transient(exc):
                raise _interrupted(journal, exc) from None
            log.error("run %s cannot be replayed: %s", run_id, exc)
            status = await park_broken(journal, exc)
            return {"status": status.value, "record": journal.last_record}
        info = journal.info
        workflow = get_workflow(info.workflow)
        try:
            # perdure.spi.drive reports the drive to the metrics and traces observers
            status = await drive(
                journal, workflow, info.input, history, carried=carried, details=info.details
            )
        except LeaseLostError:
            # A later attempt (or the run's end) came first; nothing of ours stands.
            return {"stale": True}
        except Drained:
            return {"again": True}  # the workflow schedules the next drive
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the activity is cancelled (see ``_await_drive``)
            # The run's own code raised it: not the activity's cancellation. The caller
            # is told; the attempt fails, and Temporal drives the run again later.
            if not self.raised(run_id).done():
                self.raised(run_id).set_result(exc)
            raise _interrupted(journal, exc) from None
        except Exception as exc:
            if _transient(exc):
                raise _interrupted(journal, exc) from None
            log.error("run %s: Temporal refused: %s; parking it", run_id, exc)
            error = exc
            if not isinstance(error, PerdureError):
                error = SubstrateError(f"{type(exc).__name__}: {exc}")
            status = await park_broken(journal, error)
        return {"status": status.value, "record": journal.last_record}

    async def _await_drive(
        self, journal: DriveJournal, task: asyncio.Task[dict[str, Any]]
    ) -> dict[str, Any]:
        """The drive's result. The run's cancel (the workflow cancelled this activity;
        a heartbeat brought it) cancels the step in flight, and the drive goes on to
        end the run perdure's way: compensations run, an effect whose outcome nobody
        knows parks it; the record is the result. Any other cancellation of the
        activity (its workflow closed or was reset, or the worker's drain period ran
        out) stops the drive at once; unless Temporal timed the attempt out while it
        was alive (its worker stalled): then the step in hand finishes, for up to
        ``ZOMBIE_GRACE``, and the drive's next write, fenced out, hands an effect's
        outcome over (``late_outcome``)."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done() and journal.attempt.run_cancelled():
                journal.run_cancelled()
                task.cancel(RUN_CANCELLED)
                # Cancelled between two steps, the drive raises CancelledError: the
                # activity is cancelled, and the run's next drive compensates.
                return await task
            if not task.done() and journal.attempt.timed_out():
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(task), ZOMBIE_GRACE)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            raise

    async def _heartbeat(self, journal: DriveJournal) -> None:
        """Heartbeat (the last recorded step, the completions not yet acknowledged) every
        quarter of the timeout; when the worker begins to shut down, let the drive finish
        the step in hand and stop at the next boundary (drain)."""
        period = max(float(self.config.heartbeat_timeout) / 4, 0.2)
        shutdown = asyncio.ensure_future(journal.attempt.shutdown.wait())
        try:
            while True:
                # Not at once: Temporal's heartbeat timer starts with the attempt, so a
                # drive shorter than a period (most of them) sends none at all.
                await asyncio.wait((shutdown,), timeout=period)
                if shutdown.done():
                    journal.stopping = True
                journal.heartbeat()
        finally:
            shutdown.cancel()


def _transient(exc: BaseException) -> bool:
    """Temporal's passing states, and what perdure classifies as transient."""
    return is_transient(exc) or classify(exc) == "transient"


def _interrupted(journal: DriveJournal, exc: BaseException) -> ApplicationError:
    """This attempt fails (Temporal retries it, on this worker or another) with its
    unacknowledged completions in its last heartbeat, for the next attempt."""
    journal.heartbeat()
    return ApplicationError(
        f"drive of run {journal.run_id!r} interrupted: {type(exc).__name__}: {exc}",
        type=INTERRUPTED,
    )


def _effect_outcome(event: NewEvent) -> bool:
    """An effect's completion or failure: what a fenced-out attempt hands over."""
    kinds = (EventKind.STEP_COMPLETED, EventKind.STEP_FAILED)
    return event.kind in kinds and (event.data or {}).get("kind") == "effect"


def _unrecorded(details: Sequence[Any]) -> list[dict[str, Any]]:
    """The unacknowledged completions in an earlier attempt's last heartbeat."""
    last = details[-1] if details else None
    return list(last.get("unrecorded") or ()) if isinstance(last, dict) else []


__all__ = ["INTERRUPTED", "DriveJournal", "Drives", "carried_from"]
