"""``perdure.run``: the Temporal workflow that is one perdure run.

The workflow holds the run's record, its history and its signal inbox, and applies the
store operations of perdure's engine as Temporal updates, one workflow task each: an
append is fenced by an update validator, so a driver that lost its lease is refused
before anything reaches the history. Temporal keeps every accepted update in the
workflow's event history, which is what makes the run durable; replaying that history
rebuilds this object on any worker.

The history is not kept in memory: ``TemporalStore`` reads it back from the
workflow's event history (the start input and the arguments of completed appends).
Event data, the run's input and result and signal payloads travel as JSON text (or as
a reference to a payload stored aside, see ``perdure_temporal.payloads``); the workflow
never parses them, so it stays deterministic whatever the data holds.

This module imports nothing but the standard library and ``temporalio``: it runs in
Temporal's workflow sandbox.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError

WORKFLOW_TYPE = "perdure.run"

#: Search attributes: what ``list_runs`` and ``claim_due`` filter on in visibility.
STATUS = SearchAttributeKey.for_keyword("PerdureStatus")
WORKFLOW = SearchAttributeKey.for_keyword("PerdureWorkflow")
DUE_AT = SearchAttributeKey.for_float("PerdureDueAt")
SEARCH_ATTRIBUTES = (STATUS, WORKFLOW, DUE_AT)

#: ``PerdureDueAt`` of a run nobody can take before someone acts (parked, waiting for a
#: signal without a deadline, finished).
NEVER = 1.0e15

TERMINAL = ("succeeded", "failed", "cancelled")

#: History events after which a run continues as new (Temporal's hard limit is 51,200;
#: it warns from 10,240). The URL's ``history_limit`` overrides it.
HISTORY_LIMIT = 8_000
CLAIMABLE = ("pending", "running", "suspended")

#: Error types a refused update carries (``ApplicationError.type``).
LEASE_LOST = "PerdureLeaseLost"
INVALID_STATE = "PerdureInvalidRunState"


def due_at(run: dict[str, Any]) -> float:
    """When a worker may first take ``run`` (as ``acquire`` decides, without a clock)."""
    status = run["status"]
    if status in ("pending", "running"):
        return float(run["lease_until"] or 0.0) if run["owner"] else 0.0
    if status == "suspended" and run["wake_at"] is not None:
        return float(run["wake_at"])
    return NEVER


@workflow.defn(name=WORKFLOW_TYPE)
class PerdureRun:
    """One run: record, history and inbox, changed only through the updates below."""

    @workflow.init
    def __init__(self, start: dict[str, Any]) -> None:
        self.run: dict[str, Any] = dict(start["run"])
        carried: dict[str, Any] = start.get("carried") or {}
        #: Events are kept by Temporal's history (the update arguments), not in memory.
        self.next_seq = int(carried.get("next_seq", 1))
        self.signals: list[dict[str, Any]] = list(carried.get("signals", []))
        self.next_signal_id = int(carried.get("next_signal_id", 1))
        self.history_limit = int(start.get("history_limit") or HISTORY_LIMIT)
        self._shown: tuple[str, float] | None = None

    @workflow.run
    async def main(self, start: dict[str, Any]) -> dict[str, Any]:
        self._publish()
        while True:
            try:
                await workflow.wait_condition(lambda: self._ended() or self._too_long())
                if self._ended():
                    return self.run  # the final record: read without replaying the workflow
                await workflow.wait_condition(workflow.all_handlers_finished)
                # A long run goes on in a fresh execution of the same workflow id; the
                # store reads the history across the chain.
                workflow.continue_as_new(
                    {
                        "run": self.run,
                        "event": None,
                        "history_limit": self.history_limit,
                        "carried": {
                            "next_seq": self.next_seq,
                            "signals": [s for s in self.signals if not s["consumed"]],
                            "next_signal_id": self.next_signal_id,
                        },
                    }
                )
            except asyncio.CancelledError:
                # `temporal workflow cancel` is a perdure cancellation request: the run
                # compensates and ends cancelled through its driver, like `perdure cancel`.
                self._cancel(float(workflow.now().timestamp()))

    def _ended(self) -> bool:
        return self.run["status"] in TERMINAL and workflow.all_handlers_finished()

    def _too_long(self) -> bool:
        return workflow.info().get_current_history_length() >= self.history_limit

    # -- reading --------------------------------------------------------------------------

    @workflow.query
    def info(self) -> dict[str, Any]:
        return self.run

    @workflow.query
    def next_signal(self, name: str) -> dict[str, Any] | None:
        return self._next_signal(name)

    # -- the driver's writes (fenced) -----------------------------------------------------

    @workflow.update
    def append(self, arg: dict[str, Any]) -> dict[str, Any]:
        run = self.run
        now = float(arg["now"])
        self.next_seq += len(arg["events"])
        consume = arg.get("consume_signal")
        if consume is not None:
            for s in self.signals:
                if s["signal_id"] == consume:
                    s["consumed"] = True
        run["updated_at"] = now
        update = arg.get("update")
        if update is None:
            run["lease_until"] = now + float(arg["lease_seconds"])
        else:
            run.update(
                status=update["status"],
                result=update.get("result"),
                result_ref=update.get("result_ref"),
                error=update.get("error"),
                waiting_for=update.get("waiting_for"),
                wake_at=update.get("wake_at"),
                attention=update.get("attention"),
                owner=None,
                lease_until=None,
            )
            waiting = update.get("waiting_for")
            if update["status"] == "suspended" and waiting and self._next_signal(waiting):
                run["wake_at"] = now
            self._publish()
        return {"next_seq": self.next_seq, "cancel_requested": run["cancel_requested"]}

    @append.validator
    def _check_fence(self, arg: dict[str, Any]) -> None:
        run = self.run
        if run["fence"] != arg["fence"] or run["owner"] != arg["owner"]:
            raise ApplicationError(
                f"run {run['run_id']!r}: lease of {arg['owner']} (fence {arg['fence']}) "
                f"was taken over (now {run['owner']}, fence {run['fence']})",
                type=LEASE_LOST,
                non_retryable=True,
            )

    @workflow.update
    def acquire(self, arg: dict[str, Any]) -> dict[str, Any] | None:
        run = self.run
        now = float(arg["now"])
        if run["status"] not in CLAIMABLE:
            return None
        if run["status"] == "suspended" and (run["wake_at"] is None or run["wake_at"] > now):
            return None
        free = run["owner"] is None or (run["lease_until"] or 0.0) < now
        if not (free or (arg.get("break_owner") and run["owner"] == arg["break_owner"])):
            return None
        run.update(
            fence=run["fence"] + 1,
            owner=arg["owner"],
            lease_until=now + float(arg["lease_seconds"]),
            status="running",
            wake_at=None,
            waiting_for=None,
        )
        self._publish()
        return {
            "fence": run["fence"],
            "next_seq": self.next_seq,
            "cancel_requested": run["cancel_requested"],
        }

    @workflow.update
    def renew(self, arg: dict[str, Any]) -> None:
        if self.run["owner"] == arg["owner"]:
            self.run["lease_until"] = float(arg["now"]) + float(arg["lease_seconds"])
            self._publish()

    @workflow.update
    def release(self, arg: dict[str, Any]) -> None:
        run = self.run
        if run["fence"] == arg["fence"] and run["owner"] == arg["owner"]:
            run["owner"] = None
            run["lease_until"] = None
            self._publish()

    # -- everyone else's writes ----------------------------------------------------------

    @workflow.update
    def deliver_signal(self, arg: dict[str, Any]) -> dict[str, Any]:
        run = self.run
        now = float(arg["now"])
        record = {
            "signal_id": self.next_signal_id,
            "name": arg["name"],
            "payload": arg.get("payload"),
            "payload_ref": arg.get("payload_ref"),
            "sent_by": arg.get("sent_by"),
            "sent_at": now,
            "consumed": False,
        }
        self.next_signal_id += 1
        self.signals.append(record)
        if run["status"] == "suspended" and run["waiting_for"] == arg["name"]:
            run["wake_at"] = now
            self._publish()
        return record

    @deliver_signal.validator
    def _check_signal(self, arg: dict[str, Any]) -> None:
        if self.run["status"] in TERMINAL:
            raise ApplicationError(
                f"run {self.run['run_id']!r} is {self.run['status']}; it takes no signals",
                type=INVALID_STATE,
                non_retryable=True,
            )

    @workflow.update
    def request_cancel(self, arg: dict[str, Any]) -> dict[str, Any]:
        self._cancel(float(arg["now"]))
        return self.run

    @request_cancel.validator
    def _check_cancel(self, arg: dict[str, Any]) -> None:
        if self.run["status"] in TERMINAL:
            raise ApplicationError(
                f"run {self.run['run_id']!r} is already {self.run['status']}",
                type=INVALID_STATE,
                non_retryable=True,
            )

    @workflow.update
    def admin_append(self, arg: dict[str, Any]) -> dict[str, Any]:
        run = self.run
        now = float(arg["now"])
        self.next_seq += len(arg["events"])
        run.update(status=arg["status"], attention=None, wake_at=now, updated_at=now)
        self._publish()
        return run

    @admin_append.validator
    def _check_expected(self, arg: dict[str, Any]) -> None:
        if self.run["status"] not in arg["expect"]:
            raise ApplicationError(
                f"run {self.run['run_id']!r} is {self.run['status']}; expected "
                + " or ".join(arg["expect"]),
                type=INVALID_STATE,
                non_retryable=True,
            )

    # -- helpers --------------------------------------------------------------------------

    def _next_signal(self, name: str) -> dict[str, Any] | None:
        for s in self.signals:
            if s["name"] == name and not s["consumed"]:
                return s
        return None

    def _cancel(self, now: float) -> None:
        run = self.run
        if run["status"] in TERMINAL:
            return
        run["cancel_requested"] = True
        if run["status"] in ("suspended", "needs-attention"):
            run["status"] = "suspended"
            run["wake_at"] = now
        run["updated_at"] = now
        self._publish()

    def _publish(self) -> None:
        """Mirror status and due time into visibility when they changed."""
        shown = (self.run["status"], due_at(self.run))
        if shown == self._shown:
            return
        first = self._shown is None
        self._shown = shown
        updates = [STATUS.value_set(shown[0]), DUE_AT.value_set(shown[1])]
        if first:  # also after a continue-as-new
            updates.append(WORKFLOW.value_set(self.run["workflow"]))
        workflow.upsert_search_attributes(updates)


#: How long a workflow task may take before Temporal hands it to another worker. Ours
#: are tiny, but on a loaded machine a worker may not get the CPU for seconds; a task
#: that times out leaves the workflow "in failed state" until it is retried, so this is
#: generous. A SIGKILLed worker's task moves on after the sticky timeout, not this one.
TASK_TIMEOUT = timedelta(seconds=10)
