"""``perdure.run``: the Temporal workflow that schedules, times and recovers one run.

The workflow is a small supervisor. It schedules a ``perdure.drive`` activity (see
``drive.py``), which runs perdure's replay engine, unchanged, on any worker of the task
queue; the drive records each step as one ``append`` update to this workflow, fenced by
the drive attempt that ``begin`` admitted, so a stale attempt (a worker that lost its
heartbeat but still runs) is refused before anything reaches the history. The drive's
last record (the run ended, suspended or parked) is the activity's result instead: only
the attempt Temporal still runs can complete, and it costs no update. When the
drive stops because the run waits — for a signal, a deadline, a durable sleep — the
workflow waits with a Temporal timer and ``workflow.wait_condition`` on its signal
inbox, then schedules the next drive; when the run ends, the workflow completes with
the run's record. Temporal retries a drive whose worker died (heartbeat timeout) on
any other worker: there are no perdure leases, renewals or polling on this backend.

Signals are Temporal signals (any name: ``temporal workflow signal --name approval``
works); cancel, resume and reconcile are updates whose validators refuse a run in the
wrong state. The record is mirrored into the workflow's memo and search attributes
(``PerdureStatus``, ``PerdureWorkflow``) whenever its status changes, so reads and
listings go to visibility and ``describe``, never to a worker.

Event data, input and results travel as JSON text (or references to payloads stored
aside): the workflow never parses them. It imports only the standard library,
``temporalio`` and ``story.py`` (what the UI shows; standard library only) and reads
time only through ``workflow.now()``, so it is deterministic and runs without the
sandbox. Drives, timers and the workflow's current details carry summaries that tell
the run's story in Temporal's UI and CLI (``story.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import (
    RawValue,
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from perdure_temporal import story

WORKFLOW_TYPE = "perdure.run"
DRIVE_ACTIVITY = "perdure.drive"

#: Search attributes (``perdure temporal setup`` or the dev server create them).
STATUS = SearchAttributeKey.for_keyword("PerdureStatus")
WORKFLOW = SearchAttributeKey.for_keyword("PerdureWorkflow")
SEARCH_ATTRIBUTES = (STATUS, WORKFLOW)
#: The memo key holding the run's record.
MEMO = "perdure"
INPUT_MEMO = "perdure_input"

TERMINAL = ("succeeded", "failed", "cancelled")
#: Event kinds that record a step's outcome (``perdure.spi.EventKind``).
OUTCOMES = ("step_completed", "step_failed")
#: ``perdure.spi.Attention.UNKNOWN_OUTCOME``.
UNKNOWN_OUTCOME = "unknown-outcome"

#: Error types a refused update carries (``ApplicationError.type``).
STALE_DRIVE = "PerdureStaleDrive"
INVALID_STATE = "PerdureInvalidRunState"
APPROVAL_NOT_PENDING = "PerdureApprovalNotPending"

#: ``perdure.spi.approvals``, restated with the standard library (the workflow
#: imports nothing else): an answer to an approval is stored under its request's
#: channel, only while the run waits on it, and storing it clears the wait.
APPROVAL = "approval"
CHANNEL = "approval:"

#: History events after which a run continues as new between two drives.
HISTORY_LIMIT = 8_000

#: How long a workflow task may take before Temporal hands it to another worker. Ours
#: are tiny, but on a loaded machine a worker may not get the CPU for seconds; a task
#: that times out leaves the workflow "in failed state" until it is retried.
TASK_TIMEOUT = timedelta(seconds=10)

#: Drives are retried forever (a drive fails only for a transient reason: user code's
#: failures are the run's, recorded by the drive itself), backing off to this.
DRIVE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
)


@workflow.defn(name=WORKFLOW_TYPE)
class PerdureRun:
    """One run: its record, inbox and drive fence; changed only by the handlers below."""

    @workflow.init
    def __init__(self, start: dict[str, Any]) -> None:
        self.run: dict[str, Any] = dict(start["run"])
        carried: dict[str, Any] = start.get("carried") or {}
        self.next_seq = int(carried.get("next_seq", 1))
        self.signals: list[dict[str, Any]] = list(carried.get("signals", []))
        self.next_signal_id = int(carried.get("next_signal_id", 1))
        self.drives = int(carried.get("drives", 0))
        #: Outcomes of non-idempotent effects that a drive attempt learned after a later
        #: attempt had fenced it out (``late_outcome``), by step key: the next drive
        #: records them instead of parking the run on their intents.
        self.late: dict[str, dict[str, Any]] = dict(carried.get("late", {}))
        #: The (drive, attempt) that ``begin`` last admitted.
        self.admitted: tuple[int, int] = (0, 0)
        self.config: dict[str, Any] = dict(start["config"])
        self.due = bool(carried.get("due", True))
        self._shown: tuple[str, bool] | None = None
        #: What the run waited for when the memo was last written (``_publish``).
        self._waits: tuple[Any, Any] | None = None
        #: The run's first event, while it is all the history (the first drive needs
        #: no read of the history then). Not after a reset: the drives of the execution
        #: it was reset from recorded more, which the next drive has to read.
        info = workflow.info()
        fresh = not carried and info.run_id == info.first_execution_run_id
        self.first_event: dict[str, Any] | None = start.get("event") if fresh else None
        #: The run was parked during this execution: the workflow continues as new, so
        #: a caller long-polling for the execution's close (``wait``) hears of it.
        self.parked_here = False
        #: For the story Temporal's UI and CLI tell (``story.py``): the last step a drive
        #: recorded and what made the next drive due.
        self.last_step: str | None = carried.get("last_step")
        self.woken_by = "start" if not carried else "continued as new"
        #: The drive activity in flight, if one is: a cancel of the run cancels it.
        self._driving: workflow.ActivityHandle[Any] | None = None

    @workflow.run
    async def main(self, start: dict[str, Any]) -> dict[str, Any]:
        if start.get("published"):
            # The start (or continue-as-new) set this very memo and these search
            # attributes: writing them again would cost two history events and two
            # visibility writes per run, for nothing.
            self._shown = (self.run["status"], bool(self.run["cancel_requested"]))
            self._waits = (self.run["waiting_for"], self.run["wake_at"])
        else:  # started before starts said so: replays as it ran
            self._publish()
        while True:
            try:
                if self.run["status"] in TERMINAL:
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    return self.run
                # (patched: executions recorded before this change replay unchanged)
                parked = self.parked_here and not self.due and workflow.patched("park-anew")
                if parked or self._too_long():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    # The record as it is now: Temporal would carry the start's memo.
                    workflow.continue_as_new(
                        self._carry(),
                        memo=initial_memo(self.run),
                        search_attributes=TypedSearchAttributes(
                            [
                                SearchAttributePair(STATUS, self.run["status"]),
                                SearchAttributePair(WORKFLOW, self.run["workflow"]),
                            ]
                        ),
                    )
                if self.due:
                    await self._drive()
                else:
                    await self._wait()
            except asyncio.CancelledError:
                # `temporal workflow cancel` is a perdure cancellation: the drive in
                # flight is cancelled (see ``_cancel``), or the next drive compensates.
                self._cancel(workflow.now().timestamp())

    # -- scheduling -----------------------------------------------------------------------

    async def _drive(self) -> None:
        self.due = False
        self.drives += 1
        if self.run["status"] not in ("running",):
            self.run["status"] = "running"
            self._publish()
        # Attempt 1 is admitted now, with what ``begin`` would return: one update less
        # per drive. A retry (attempt 2 on) still calls ``begin``, which fences it out.
        self.admitted = (self.drives, 1)
        self.run["fence"] += 1
        begun = self._begun()
        if self.first_event is not None and self.next_seq == 1:
            begun["history"] = [{**self.first_event, "seq": 0}]
        cfg = self.config
        handle = workflow.start_activity(
            DRIVE_ACTIVITY,
            {"run_id": self.run["run_id"], "drive": self.drives, "begun": begun},
            task_queue=cfg["task_queue"],
            start_to_close_timeout=timedelta(seconds=float(cfg["drive_timeout"])),
            heartbeat_timeout=timedelta(seconds=float(cfg["heartbeat_timeout"])),
            retry_policy=DRIVE_RETRY,
            # A cancelled drive cancels the step in flight, compensates and records
            # the run cancelled: its result is that record, so wait for it.
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=story.drive_summary(self.run, self.drives, self.woken_by, self.last_step),
        )
        self._tell()
        # Wait on the handle's completion, not the handle: a workflow cancellation
        # then lands here and is a perdure cancel (``_cancel`` cancels the drive).
        self._driving = handle
        try:
            while not handle.done():
                try:
                    await workflow.wait_condition(handle.done)
                except asyncio.CancelledError:
                    self._cancel(workflow.now().timestamp())
        finally:
            self._driving = None
        try:
            outcome: dict[str, Any] = handle.result()
        except (ActivityError, asyncio.CancelledError) as exc:
            cause = exc.cause if isinstance(exc, ActivityError) else exc
            if self.run["cancel_requested"] and isinstance(
                cause, (CancelledError, asyncio.CancelledError)
            ):
                # Cancelled outside a step (or before it began): the next drive
                # compensates and ends the run.
                self.due = True
                return
            self._park({"reason": "drive-failed", "message": str(cause or exc)})
            return
        if outcome.get("record") is not None:
            # The drive's last record (its stop: ended, suspended or parked) is its
            # result: only the attempt Temporal still runs can complete, so it is
            # fenced, and it costs no update of its own.
            self._record(outcome["record"])
        if outcome.get("again"):  # the drive stopped early (history full, drain)
            self.due = True
        elif self.run["status"] == "running":
            # The drive returned without a final record (a stale attempt): drive again.
            self.due = True
        elif self.run["status"] == "suspended" and self.run["cancel_requested"]:
            # The drive suspended the run before its cancellation reached it.
            self.due = True

    async def _wait(self) -> None:
        run = self.run
        if run["status"] == "suspended" and self._woken():
            self.due = True
            self.woken_by = f"signal {run['waiting_for']!r}"
            return
        timeout: float | None = None
        if run["status"] == "suspended" and run["wake_at"] is not None:
            timeout = max(float(run["wake_at"]) - workflow.now().timestamp(), 0.0)
        try:
            await workflow.wait_condition(
                lambda: self.due or self._woken() or self._too_long(),
                timeout=None if timeout is None else timedelta(seconds=timeout),
                timeout_summary=story.timer_summary(run),
            )
        except TimeoutError:
            pass
        if run["status"] == "suspended" and self._woken():
            self.due = True
            self.woken_by = f"signal {run['waiting_for']!r}"
        elif run["status"] == "suspended" and self._timer_fired():
            self.due = True
            self.woken_by = "timer"

    def _woken(self) -> bool:
        run = self.run
        return bool(run["waiting_for"]) and self._next_signal(run["waiting_for"]) is not None

    def _timer_fired(self) -> bool:
        wake_at = self.run["wake_at"]
        return wake_at is not None and float(wake_at) <= workflow.now().timestamp()

    def _drive_limit(self) -> int:
        """History events after which a drive stops at its next step so the workflow
        can continue as new: well past ``history_limit`` (which applies between
        drives), since each drive re-reads the history, and below Temporal's 51,200."""
        return min(10 * int(self.config.get("history_limit") or HISTORY_LIMIT), 40_000)

    def _too_long(self) -> bool:
        limit = int(self.config.get("history_limit") or HISTORY_LIMIT)
        return workflow.info().get_current_history_length() >= limit

    def _carry(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "event": None,
            "config": self.config,
            "published": True,  # continue_as_new is given the memo and search attributes
            "carried": {
                "next_seq": self.next_seq,
                "signals": [s for s in self.signals if not s["consumed"]],
                "next_signal_id": self.next_signal_id,
                "drives": self.drives,
                "due": self.due,
                "late": self.late,
                "last_step": self.last_step,
            },
        }

    # -- reading --------------------------------------------------------------------------

    @workflow.query
    def info(self) -> dict[str, Any]:
        return self.run

    # -- the drive's writes (fenced) ------------------------------------------------------

    @workflow.update
    def begin(self, arg: dict[str, Any]) -> dict[str, Any]:
        """Admit drive attempt ``(drive, attempt)``: every earlier attempt is fenced out."""
        self.admitted = (int(arg["drive"]), int(arg["attempt"]))
        self.run["fence"] += 1
        return self._begun()

    def _begun(self) -> dict[str, Any]:
        """What a drive attempt starts from: the record (its input is in the history),
        its fence, the next event's number and the unconsumed signals."""
        return {
            "run": {k: v for k, v in self.run.items() if k != "input"},
            "fence": self.run["fence"],
            "next_seq": self.next_seq,
            "signals": [s for s in self.signals if not s["consumed"]],
            "late": list(self.late.values()),
        }

    @begin.validator
    def _check_begin(self, arg: dict[str, Any]) -> None:
        attempt = (int(arg["drive"]), int(arg["attempt"]))
        if attempt[0] != self.drives or attempt <= self.admitted:
            raise _refused(
                f"run {self.run['run_id']!r}: drive {attempt} is stale "
                f"(drive {self.drives}, admitted {self.admitted})",
                STALE_DRIVE,
            )
        if self.run["status"] in TERMINAL:
            raise _refused(
                f"run {self.run['run_id']!r} is {self.run['status']}",
                INVALID_STATE,
            )

    @workflow.update
    def append(self, arg: dict[str, Any]) -> dict[str, Any]:
        run = self._record(arg)
        return {
            "next_seq": self.next_seq,
            "cancel_requested": run["cancel_requested"],
            # Signals that arrived while the drive ran: its next wait sees them.
            "signals": [s for s in self.signals if not s["consumed"]],
            "history_full": workflow.info().get_current_history_length() >= self._drive_limit(),
        }

    def _record(self, arg: dict[str, Any]) -> dict[str, Any]:
        """Apply one of the drive's records (an ``append``, or the drive's result)."""
        run = self.run
        now = float(arg["now"])
        self.next_seq += len(arg["events"])
        for event in arg["events"]:
            if event["kind"] in OUTCOMES:
                self.late.pop(event["step_key"], None)  # recorded now
            self.last_step = event.get("step_key") or self.last_step
        consume = arg.get("consume_signal")
        if consume is not None:
            for s in self.signals:
                if s["signal_id"] == consume:
                    s["consumed"] = True
        run["updated_at"] = now
        update = arg.get("update")
        if update is not None:
            run.update(
                status=update["status"],
                result=update.get("result"),
                result_ref=update.get("result_ref"),
                error=update.get("error"),
                waiting_for=update.get("waiting_for"),
                wake_at=update.get("wake_at"),
                attention=update.get("attention"),
            )
            self.parked_here = self.parked_here or run["status"] == "needs-attention"
            self._unpark_late()
            self._publish()
        self._tell()
        return run

    @workflow.update
    def late_outcome(self, arg: dict[str, Any]) -> None:
        """A fenced-out attempt's outcome of an effect whose intent it recorded: kept for
        the next drive, which records it where it would park on the intent (the
        effect happened once; nobody has to reconcile it). Parked on it already: the
        run is due again."""
        for event in arg["events"]:
            self.late[event["step_key"]] = event
        self._unpark_late()
        self._publish()

    @late_outcome.validator
    def _check_late(self, arg: dict[str, Any]) -> None:
        if self.run["status"] in TERMINAL:
            raise _refused(f"run {self.run['run_id']!r} is {self.run['status']}", INVALID_STATE)

    def _unpark_late(self) -> None:
        """Parked on the unknown outcome of an effect whose outcome came late: drive on."""
        run = self.run
        attention = run["attention"] if run["status"] == "needs-attention" else None
        if not isinstance(attention, dict) or attention.get("reason") != UNKNOWN_OUTCOME:
            return
        if attention.get("step_key") not in self.late:
            return
        run.update(status="suspended", attention=None, wake_at=workflow.now().timestamp())
        self.parked_here = False
        self.due = True

    @append.validator
    def _check_fence(self, arg: dict[str, Any]) -> None:
        if self.run["fence"] != arg["fence"]:
            raise _refused(
                f"run {self.run['run_id']!r}: drive with fence {arg['fence']} was "
                f"superseded (fence now {self.run['fence']})",
                STALE_DRIVE,
            )

    # -- everyone else's writes ----------------------------------------------------------

    @workflow.signal(dynamic=True)
    def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Any Temporal signal is an inbox entry (``temporal workflow signal --name
        approval --input '{"approved": true}'``): its first argument is the payload."""
        convert = workflow.payload_converter()
        payload = convert.from_payload(args[0].payload) if args else None
        meta: dict[str, Any] = convert.from_payload(args[1].payload) if len(args) > 1 else {}
        if _is_approval(name):
            if self._refuse_answer(name) is not None:
                return  # a signal cannot be refused: an answer to no pending request is dropped
            self._answer(name, payload, meta)
            return
        self._receive(name, payload, meta)

    @workflow.update
    def deliver(self, arg: dict[str, Any]) -> dict[str, Any]:
        """perdure's own signal: like a Temporal signal, but acknowledged once the run's
        record says it is due, and refused when the run has ended."""
        if _is_approval(arg["name"]):
            return self._answer(arg["name"], arg.get("payload"), arg)
        return self._receive(arg["name"], arg.get("payload"), arg)

    @deliver.validator
    def _check_deliver(self, arg: dict[str, Any]) -> None:
        if self.run["status"] in TERMINAL:
            raise _refused(
                f"run {self.run['run_id']!r} is {self.run['status']}; it takes no signals",
                INVALID_STATE,
            )
        refused = self._refuse_answer(arg["name"]) if _is_approval(arg["name"]) else None
        if refused is not None:
            raise _refused(refused, APPROVAL_NOT_PENDING)

    def _refuse_answer(self, name: str) -> str | None:
        """Why an answer called ``name`` is refused now, or None: it must name the
        request the run waits on (``approval`` alone: whichever that is)."""
        run = self.run
        waiting = run["waiting_for"] if run["status"] == "suspended" else None
        if not (isinstance(waiting, str) and waiting.startswith(CHANNEL)):
            return f"the run is {run['status']}; it waits for no approval (not yet, or answered)"
        if name != APPROVAL and name != waiting:
            return f"the request pending is {waiting[len(CHANNEL) :]!r}"
        return None

    def _answer(self, name: str, payload: Any, meta: dict[str, Any]) -> dict[str, Any]:
        """Store an answer under the pending request's channel and clear the wait, in
        this one handler: a second answer to the request is refused."""
        record = self._receive(self.run["waiting_for"], payload, meta)
        self.run.update(waiting_for=None, attention=None)
        self._publish(force=True)
        return record

    def _receive(self, name: str, payload: Any, meta: dict[str, Any]) -> dict[str, Any]:
        record = {
            "signal_id": self.next_signal_id,
            "name": name,
            "payload": payload,
            "payload_ref": meta.get("payload_ref"),
            "sent_by": meta.get("sent_by"),
            "sent_at": float(meta.get("sent_at") or workflow.now().timestamp()),
            "decision": meta.get("decision"),
            "consumed": False,
        }
        self.signals.append(record)
        self.next_signal_id += 1
        run = self.run
        if run["status"] == "suspended" and run["waiting_for"] == name:
            # Due now: the record says so at once, before the next drive starts.
            run["wake_at"] = record["sent_at"]
            self.due = True
            self.woken_by = f"signal {name!r}"
            self._publish(force=True)
        return record

    @workflow.update
    def request_cancel(self, arg: dict[str, Any]) -> dict[str, Any]:
        self._cancel(float(arg["now"]))
        return self.run

    @request_cancel.validator
    def _check_cancel(self, arg: dict[str, Any]) -> None:
        if self.run["status"] in TERMINAL:
            raise _refused(
                f"run {self.run['run_id']!r} is already {self.run['status']}",
                INVALID_STATE,
            )

    @workflow.update
    def admin_append(self, arg: dict[str, Any]) -> dict[str, Any]:
        run = self.run
        now = float(arg["now"])
        self.next_seq += len(arg["events"])
        run.update(status=arg["status"], attention=None, wake_at=now, updated_at=now)
        self.due = True
        self.woken_by = "operator"
        self._publish()
        return run

    @admin_append.validator
    def _check_expected(self, arg: dict[str, Any]) -> None:
        if self.run["status"] not in arg["expect"]:
            raise _refused(
                f"run {self.run['run_id']!r} is {self.run['status']}; expected "
                + " or ".join(arg["expect"]),
                INVALID_STATE,
            )

    # -- helpers --------------------------------------------------------------------------

    def _next_signal(self, name: str) -> dict[str, Any] | None:
        for s in self.signals:
            if s["name"] == name and not s["consumed"]:
                return s
        return None

    def _cancel(self, now: float) -> None:
        run = self.run
        if run["status"] in TERMINAL or run["cancel_requested"]:
            return
        run["cancel_requested"] = True
        run["updated_at"] = now
        self.woken_by = "cancel"
        self._publish()
        # The drive in flight is cancelled (its heartbeat hears of it): the step it runs
        # is cancelled, and the drive ends the run (compensated and cancelled, or parked
        # on an effect whose outcome nobody knows); ``_drive`` drives again if it did
        # not. (patched: executions recorded before this change replay unchanged)
        driving = self._driving
        if driving is not None and not driving.done() and workflow.patched("cancel-drive"):
            driving.cancel()
            return
        # No drive in flight: the next one compensates and ends the run.
        self.due = True

    def _park(self, attention: dict[str, Any]) -> None:
        self.run.update(status="needs-attention", attention=attention)
        self.parked_here = True
        self._publish()

    def _publish(self, *, force: bool = False) -> None:
        """Mirror the record into memo and search attributes when its status changed,
        and the memo when what the run waits for changed: a drive Temporal retried after
        its worker died goes from one suspension (a timer) to the next (a signal) without
        passing through running, and readers (``get_run``, a webhook, the console) must
        not be shown the timer."""
        self._tell()
        shown = (self.run["status"], bool(self.run["cancel_requested"]))
        waits = (self.run["waiting_for"], self.run["wake_at"])
        if shown == self._shown and not force:
            # (patched: executions recorded before this change replay unchanged)
            if waits != self._waits and workflow.patched("publish-waits"):
                self._waits = waits
                workflow.upsert_memo({MEMO: {k: v for k, v in self.run.items() if k != "input"}})
            return
        first = self._shown is None
        self._shown = shown
        self._waits = waits
        updates = [STATUS.value_set(shown[0])]
        if first:  # also after a continue-as-new
            updates.append(WORKFLOW.value_set(self.run["workflow"]))
        workflow.upsert_search_attributes(updates)
        workflow.upsert_memo({MEMO: {k: v for k, v in self.run.items() if k != "input"}})

    def _tell(self) -> None:
        """The workflow's current details (no command: nothing in the history)."""
        workflow.set_current_details(story.details(self.run, self.drives, self.last_step))


def _refused(message: str, kind: str) -> ApplicationError:
    """A validator's refusal (``kind``: ``STALE_DRIVE``, ``INVALID_STATE`` or
    ``APPROVAL_NOT_PENDING``): the update never reaches the history, and the caller
    raises the matching perdure error."""
    return ApplicationError(message, type=kind, non_retryable=True)


def _is_approval(name: str) -> bool:
    return name == APPROVAL or name.startswith(CHANNEL)


def initial_memo(run: dict[str, Any]) -> dict[str, Any]:
    """The memo a run's workflow starts with (its input is only in this one)."""
    return {MEMO: {k: v for k, v in run.items() if k != "input"}, INPUT_MEMO: run["input"]}
