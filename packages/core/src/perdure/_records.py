"""The records a backend stores and returns: runs, history events, signals."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class RunStatus(str, enum.Enum):
    """Where a run is in its life: ``pending → running → (suspended ↔ running)* → end``."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    NEEDS_ATTENTION = "needs-attention"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class EventKind(str, enum.Enum):
    """What one history event records."""

    RUN_STARTED = "run_started"
    STEP_COMPLETED = "step_completed"
    STEP_FAILED = "step_failed"  # permanent: the step's error is replayed
    ATTEMPT_FAILED = "attempt_failed"  # transient: a retry follows
    INTENT = "intent"  # a non-idempotent effect is about to be called
    SIGNAL_RECEIVED = "signal_received"
    TIMER_STARTED = "timer_started"
    MARKER = "marker"  # patch markers and other replay-only facts
    SUSPENDED = "suspended"
    NEEDS_ATTENTION = "needs_attention"
    RECONCILED = "reconciled"
    CANCEL_REQUESTED = "cancel_requested"
    RUN_SUCCEEDED = "run_succeeded"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"


#: Events that occupy a step position and are matched on replay.
POSITIONAL_KINDS = frozenset(
    {
        EventKind.STEP_COMPLETED,
        EventKind.STEP_FAILED,
        EventKind.SIGNAL_RECEIVED,
        EventKind.TIMER_STARTED,
        EventKind.MARKER,
    }
)


@dataclass(frozen=True, slots=True)
class Event:
    """One append-only history entry. ``data`` is JSON-compatible."""

    run_id: str
    seq: int
    kind: EventKind
    at: float
    step_key: str | None = None
    name: str | None = None
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "seq": self.seq,
            "kind": self.kind.value,
            "at": self.at,
            "step_key": self.step_key,
            "name": self.name,
            "data": self.data,
        }


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event before the store gives it a sequence number."""

    kind: EventKind
    step_key: str | None = None
    name: str | None = None
    data: Any = None


@dataclass(slots=True)
class RunInfo:
    """A run as the backend knows it now."""

    run_id: str
    workflow: str
    status: RunStatus
    input: Any
    created_at: float
    updated_at: float
    code_version: str | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    owner: str | None = None
    lease_until: float | None = None
    fence: int = 0
    cancel_requested: bool = False
    waiting_for: str | None = None
    wake_at: float | None = None
    attention: dict[str, Any] | None = None
    parent_run_id: str | None = None
    details: dict[str, Any] = field(default_factory=lambda: {})
    #: The approval request the run waits on (``waiting_for == "approval"``), named by
    #: ``perdure approve --request`` (see ``perdure._semantics.approvals``).
    request_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status.value,
            "input": self.input,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "code_version": self.code_version,
            "result": self.result,
            "error": self.error,
            "owner": self.owner,
            "lease_until": self.lease_until,
            "cancel_requested": self.cancel_requested,
            "waiting_for": self.waiting_for,
            "wake_at": self.wake_at,
            "attention": self.attention,
            "parent_run_id": self.parent_run_id,
            "request_id": self.request_id,
        }


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A signal delivered to a run's inbox, consumed at most once."""

    signal_id: int
    run_id: str
    name: str
    payload: Any
    sent_by: str | None
    sent_at: float
    #: The authorizer's decision on the sender (``perdure._authorization.Decision``).
    authorization: dict[str, Any] | None = None
