"""The storage contract of the embedded engine.

A ``Store`` keeps runs, their append-only histories and their signal inboxes. Every
write by a run's driver is fenced: it carries the ``Lease`` it was granted, and the
store rejects it with ``LeaseLostError`` once another owner took the run. One step
costs one ``append`` call, which a store must make one transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perdure._errors import Fault, classify
from perdure._records import Event, NewEvent, RunInfo, RunStatus, SignalRecord

#: Statuses a worker may claim once the lease is free (suspended ones only when due).
CLAIMABLE = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED)


@dataclass(slots=True)
class Lease:
    """The right to drive one run, valid while ``fence`` is the run's current fence."""

    run_id: str
    owner: str
    fence: int
    next_seq: int
    cancel_requested: bool = False


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """A change of status written together with the last events of a drive.

    Writing one releases the lease: the run is suspended, parked or finished.
    """

    status: RunStatus
    result: Any = None
    error: dict[str, Any] | None = None
    waiting_for: str | None = None
    wake_at: float | None = None
    attention: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class NewRun:
    """What ``create_run`` needs; ``input`` is JSON-compatible."""

    run_id: str
    workflow: str
    input: Any
    code_version: str | None = None
    parent_run_id: str | None = None
    details: dict[str, Any] = field(default_factory=lambda: {})


class Store(ABC):
    """Runs, histories and signal inboxes on one database.

    Every method raises ``BackendUnavailableError`` when the database is away for now
    and ``SubstrateError`` when it refuses for good (see ``perdure._errors``); a store
    whose driver errors escape untyped overrides ``classify`` instead.
    """

    url: str

    def classify(self, exc: BaseException) -> Fault | None:
        """Is ``exc``, raised by one of this store's methods, ``"transient"`` (retry the
        drive later) or ``"permanent"`` (park the run)? ``None``: not a substrate error."""
        return classify(exc)

    @abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date. Idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections. The store may be opened again."""

    @abstractmethod
    async def create_run(
        self, new: NewRun, owner: str, lease_seconds: float
    ) -> tuple[RunInfo, Lease | None]:
        """Create the run owned by ``owner`` and record ``run_started``.

        Starting is idempotent: when ``new.run_id`` exists, return it unchanged and
        no lease.
        """

    @abstractmethod
    async def get_run(self, run_id: str) -> RunInfo:
        """Return the run or raise ``RunNotFoundError``."""

    @abstractmethod
    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        updated_before: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by status, last update time and workflow."""

    @abstractmethod
    async def load_history(self, run_id: str) -> list[Event]:
        """The run's events in order; ``CorruptHistoryError`` names an unreadable row."""

    @abstractmethod
    async def append(
        self,
        lease: Lease,
        events: Sequence[NewEvent],
        *,
        lease_seconds: float,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        """Fenced append in one transaction.

        Adds ``events`` at ``lease.next_seq`` onwards (advancing it), extends the lease
        by ``lease_seconds`` or, with ``update``, applies it and releases the lease,
        and marks ``consume_signal`` consumed. Sets ``lease.cancel_requested`` from the
        run. Raises ``LeaseLostError`` when ``lease.fence`` is no longer current.
        A suspension (``update.status`` suspended) whose awaited signal already sits
        in the inbox leaves the run due at once, so no signal is ever missed.
        """

    @abstractmethod
    async def acquire(
        self,
        run_id: str,
        owner: str,
        lease_seconds: float,
        *,
        now: float,
        break_owner: str | None = None,
    ) -> Lease | None:
        """Take the run if it is claimable and due (see ``CLAIMABLE``) and its lease is
        free, expired, or held by ``break_owner`` (a dead process). Bumps the fence.
        """

    @abstractmethod
    async def claim_due(
        self, owner: str, lease_seconds: float, *, now: float, workflows: Sequence[str], limit: int
    ) -> list[Lease]:
        """Take up to ``limit`` due runs of the given workflows whose leases are free."""

    @abstractmethod
    async def next_wake(self, workflows: Sequence[str]) -> float | None:
        """The earliest ``wake_at`` of a suspended run of these workflows, if any."""

    @abstractmethod
    async def renew(self, owner: str, lease_seconds: float, *, now: float) -> None:
        """Extend every lease ``owner`` holds."""

    @abstractmethod
    async def release(self, lease: Lease) -> None:
        """Give the run back without changing its status (a worker shutting down)."""

    @abstractmethod
    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: Any,
        sent_by: str | None,
        *,
        now: float,
        authorization: dict[str, Any] | None = None,
    ) -> SignalRecord:
        """Put a signal in the run's inbox; a run suspended on ``name`` becomes due.
        An approval answer (``perdure._semantics.approvals``) is checked against the
        pending request and clears it, in the same transaction. ``authorization`` is
        the sender's recorded decision."""

    @abstractmethod
    async def next_signal(self, run_id: str, name: str) -> SignalRecord | None:
        """The oldest unconsumed signal called ``name``."""

    @abstractmethod
    async def request_cancel(self, run_id: str, *, now: float) -> RunInfo:
        """Flag the run for cancellation; a suspended or parked one becomes due."""

    @abstractmethod
    async def admin_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expect: Sequence[RunStatus],
        status: RunStatus,
        now: float,
    ) -> RunInfo:
        """An operator's write to a run nobody drives (reconcile, resume): append
        ``events``, set ``status`` and make it due, if its status is in ``expect``;
        else ``InvalidRunStateError``.
        """

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        """Delete those of ``run_ids`` that are finished (succeeded, failed, cancelled),
        with their history and signals, in one transaction; the ids deleted. A run
        that is not finished, or unknown, is left alone."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete runs")
