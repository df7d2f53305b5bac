"""A run's perdure history, read from its workflow's Temporal event history.

The start event comes from the workflow's input; every other event is an argument of
an ``append`` or ``admin_append`` update that completed, or the last record of a drive,
which is the ``perdure.drive`` activity's result. Nothing is asked of a worker,
so a finished, long or unattended run is read without replaying it, across every
execution it continued as new into.

A ``temporal workflow reset`` cuts the history back to an earlier workflow task; what a
drive recorded after that point is gone from the new execution, but its effects may
have happened. Every intent the reset cut off is therefore read back from the execution
it was reset from and kept, at the reset point, so replay meets an intent without an
outcome and parks the run (``unknown-outcome``) instead of sending the effect again.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import Client

from perdure_temporal.workflow import DRIVE_ACTIVITY

RECORDING_UPDATES = ("append", "admin_append")


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
    drives: set[int] = set()  # the event ids that scheduled a drive
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_task_failed_event_attributes"):
            failed = event.workflow_task_failed_event_attributes
            if failed.cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW:
                base, _ = await _read_execution(client, workflow_id, failed.base_run_id)
                rows.extend(_cut_off_intents(base, rows))
        elif event.HasField("workflow_execution_started_event_attributes"):
            attrs = event.workflow_execution_started_event_attributes
            previous = attrs.continued_execution_run_id or None
            [start] = await convert.decode(attrs.input.payloads)
            if start.get("event") is not None:
                rows.append(start["event"])
        elif event.HasField("workflow_execution_update_accepted_event_attributes"):
            update = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if update.input.name in RECORDING_UPDATES:
                [arg] = await convert.decode(update.input.args.payloads)
                accepted[update.meta.update_id] = (arg["events"], float(arg["now"]))
        elif event.HasField("workflow_execution_update_completed_event_attributes"):
            done = event.workflow_execution_update_completed_event_attributes
            appended = accepted.pop(done.meta.update_id, None)
            if appended is not None and done.outcome.HasField("success"):
                events, at = appended
                rows.extend({**ev, "at": at} for ev in events)
        elif event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == DRIVE_ACTIVITY:
                drives.add(event.event_id)
        elif event.HasField("activity_task_completed_event_attributes"):
            completed = event.activity_task_completed_event_attributes
            if completed.scheduled_event_id in drives:
                [outcome] = await convert.decode(completed.result.payloads)
                record = outcome.get("record") if isinstance(outcome, dict) else None
                if record is not None:
                    rows.extend({**ev, "at": float(record["now"])} for ev in record["events"])
    return rows, previous


def _cut_off_intents(
    base: list[dict[str, Any]], kept: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The intents of ``base`` (the execution a reset started from) that the reset cut
    off: those after the rows both executions share, ``kept``."""
    return [row for row in base[len(kept) :] if row.get("kind") == "intent"]
