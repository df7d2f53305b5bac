"""What Temporal's UI and CLI show of a perdure run: a drive's summary, a timer's summary
and the workflow's current details, so ``temporal workflow show`` and the UI read as the
run's story (which workflow, which drive and why, the last step recorded, what it waits
for) instead of opaque JSON.

Called from inside the workflow: standard library only, and deterministic (time comes
only from the record).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def drive_summary(run: dict[str, Any], drive: int, woken_by: str, last_step: str | None) -> str:
    """``drive 2 of refund: signal 'approval', after 1:lookup``."""
    after = f", after {last_step}" if last_step else ""
    return f"drive {drive} of {run['workflow']}: {woken_by}{after}"


def timer_summary(run: dict[str, Any]) -> str:
    """``refund wakes at 2026-12-01T21:40:00Z (or on signal 'approval')``."""
    waiting = run.get("waiting_for")
    wake_at = run.get("wake_at")
    when = "" if wake_at is None else f" at {_iso(float(wake_at))}"
    on = f" (or on signal {waiting!r})" if waiting else ""
    return f"{run['workflow']} wakes{when}{on}"


def details(run: dict[str, Any], drive: int, last_step: str | None) -> str:
    """The workflow's current details (the UI's "Current Details"): the run's workflow,
    status, drive and last step recorded, and what a suspended run waits for."""
    lines = [f"perdure run of {run['workflow']}: {run['status']}", f"drive {drive}"]
    if last_step:
        lines.append(f"last step recorded: {last_step}")
    if run["status"] == "suspended":
        if run.get("waiting_for"):
            lines.append(f"waits for signal {run['waiting_for']!r}")
        if run.get("wake_at") is not None:
            lines.append(f"wakes at {_iso(float(run['wake_at']))}")
    attention = run.get("attention")
    if run["status"] == "needs-attention" and isinstance(attention, dict):
        lines.append(f"needs attention: {attention.get('reason')} at {attention.get('step_key')}")
    return "\n".join(lines)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
