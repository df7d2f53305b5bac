"""Observers of drives: what metrics and traces hook into, on every backend.

``drive`` tells each registered observer that a drive of a run began (``DriveStart``),
then every batch of history the journal made durable and how long the journal took,
then how the drive ended. It lives here, beside ``drive``, so that any backend driving
runs through these semantics (the embedded engine, Temporal, DBOS) is observed the same
way, with no call of its own.

An observer is a callable ``(DriveStart) -> DriveObservation | None`` (None: not
interested in this drive), registered with ``register``. OpenTelemetry traces
(``perdure._tracing.observe``) are registered from the start: without an SDK they cost a
lookup per drive. ``perdure._metrics.enable()`` registers the Prometheus counters. An
observer's own error is logged and never reaches the drive or the workflow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from perdure import _tracing as tracing
from perdure._errors import LeaseLostError
from perdure._records import NewEvent, RunStatus
from perdure._semantics.context import Drained, ReplayEnd

__all__ = [
    "DriveObservation",
    "DriveStart",
    "Observer",
    "Observers",
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
    #: The run record's details (``RunInfo.details``): where ``perdure._tracing`` keeps
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


def observing(start: DriveStart) -> Observers | None:
    """The observations of the drive ``start`` begins, or None when nobody observes it."""
    watching: list[DriveObservation] = []
    for observer in list(_observers):
        try:
            watch = observer(start)
        except Exception:
            log.exception("drive observer %r failed at the start of run %s", observer, start.run_id)
            continue
        if watch is not None:
            watching.append(watch)
    return Observers(start.run_id, watching) if watching else None


class Observers:
    """Every observation of one drive. The drive reports each append it made durable
    (``DriveContext.append`` times the journal) and how it ended; an observer's error is
    logged here and goes no further."""

    def __init__(self, run_id: str, watching: list[DriveObservation]) -> None:
        self.run_id = run_id
        self.watching = watching

    def appended(self, events: Sequence[NewEvent], seconds: float) -> None:
        for watch in self.watching:
            try:
                watch.appended(events, seconds)
            except Exception:
                log.exception("drive observer failed on an append of run %s", self.run_id)

    def ended(self, status: RunStatus | None, error: BaseException | None = None) -> None:
        outcome = outcome_of(status, error)
        reported = error if outcome == "error" else None
        for watch in self.watching:
            try:
                watch.ended(outcome, reported)
            except Exception:
                log.exception("drive observer failed at the end of run %s", self.run_id)
