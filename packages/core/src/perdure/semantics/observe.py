"""Observers of drives: what metrics and traces hook into, on every backend.

``drive`` tells each registered observer that a drive of a run began (``DriveStart``),
then every batch of history the journal made durable and how long the journal took,
then how the drive ended. It lives here, beside ``drive``, so that any backend driving
runs through these semantics (the embedded engine, Temporal, DBOS) is observed the same
way, with no call of its own.

An observer is a callable ``(DriveStart) -> DriveObservation | None`` (None: not
interested in this drive), registered with ``register``. OpenTelemetry traces
(``perdure.tracing.observe``) are registered from the start: without an SDK they cost a
lookup per drive. ``perdure.metrics.enable()`` registers the Prometheus counters. An
observer's own error is logged and never reaches the drive or the workflow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from perdure import tracing
from perdure.errors import LeaseLostError
from perdure.records import NewEvent, RunStatus, SignalRecord
from perdure.semantics.context import Drained, ReplayEnd
from perdure.semantics.journal import Journal
from perdure.store import RunUpdate

__all__ = [
    "DriveObservation",
    "DriveStart",
    "Observer",
    "observing",
    "outcome_of",
    "register",
    "unregister",
]

log = logging.getLogger("perdure.semantics")


@dataclass(frozen=True, slots=True)
class DriveStart:
    """What an observer learns when a drive begins."""

    run_id: str
    workflow: str
    #: The run record's details (``RunInfo.details``): where ``perdure.tracing`` keeps
    #: the trace context the run was started in.
    details: Mapping[str, Any] = field(default_factory=lambda: {})


class DriveObservation(Protocol):
    """One observer's view of one drive."""

    def appended(self, events: Sequence[NewEvent], seconds: float) -> None:
        """``events`` are durable; the journal's append took ``seconds``."""
        ...

    def ended(self, outcome: str, error: BaseException | None) -> None:
        """The drive ended: ``outcome`` is the status it wrote (``succeeded``,
        ``suspended``...), ``lease-lost``, ``drained``, ``replayed`` (a replay-only
        drive reached new work), or ``error`` with ``error``
        (what stopped it: a substrate fault, a crash)."""
        ...


Observer = Callable[[DriveStart], "DriveObservation | None"]

_observers: list[Observer] = [tracing.observe]


def register(observer: Observer) -> None:
    """Observe every drive from now on, in this process (once, however often called)."""
    if observer not in _observers:
        _observers.append(observer)


def unregister(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)


def outcome_of(status: RunStatus | None, error: BaseException | None) -> str:
    """The ``outcome`` a drive that wrote ``status``, or raised ``error``, ended with."""
    if isinstance(error, LeaseLostError):
        return "lease-lost"
    if isinstance(error, Drained):
        return "drained"
    if isinstance(error, ReplayEnd):
        return "replayed"  # a replay-only check reached new work: not a failure
    if error is not None or status is None:
        return "error"
    return status.value


def observing(journal: Journal, start: DriveStart) -> ObservedJournal | None:
    """``journal`` as the drive should use it when someone observes drives, else None."""
    watching: list[DriveObservation] = []
    for observer in list(_observers):
        try:
            watch = observer(start)
        except Exception:
            log.exception("drive observer %r failed at the start of run %s", observer, start.run_id)
            continue
        if watch is not None:
            watching.append(watch)
    return ObservedJournal(journal, watching) if watching else None


class ObservedJournal:
    """A ``Journal`` that times each append and reports it to the drive's observers."""

    def __init__(self, journal: Journal, watching: list[DriveObservation]) -> None:
        self.journal = journal
        self.watching = watching

    @property
    def run_id(self) -> str:
        return self.journal.run_id

    @property
    def url(self) -> str:
        return self.journal.url

    @property
    def cancel_requested(self) -> bool:
        return self.journal.cancel_requested

    @property
    def draining(self) -> bool:
        return self.journal.draining

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        started = time.perf_counter()
        await self.journal.append(events, update=update, consume_signal=consume_signal)
        seconds = time.perf_counter() - started
        for watch in self.watching:
            try:
                watch.appended(events, seconds)
            except Exception:
                log.exception("drive observer failed on an append of run %s", self.run_id)

    async def next_signal(self, name: str) -> SignalRecord | None:
        return await self.journal.next_signal(name)

    def ended(self, status: RunStatus | None, error: BaseException | None = None) -> None:
        outcome = outcome_of(status, error)
        reported = error if outcome == "error" else None
        for watch in self.watching:
            try:
                watch.ended(outcome, reported)
            except Exception:
                log.exception("drive observer failed at the end of run %s", self.run_id)
