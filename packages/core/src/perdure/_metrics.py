"""Prometheus metrics of runs, steps, approvals and stores (``perdure[metrics]``).

Two kinds of figures:

- what this process saw happen, counted as it happens (steps, attempts, approval
  latency, parked intents, recoveries, drive failures, store round trips): every drive
  on any backend that drives through ``perdure._semantics`` reports each batch of
  history it writes (a drive observer, ``perdure._semantics.observe``);
- what the backend holds now (runs by status and workflow, suspended runs by signal and
  the age of the oldest), read with one list query by ``refresh`` before a scrape.

Off until ``enable()`` (the console and ``perdure worker --metrics-port`` call it), and
a no-op without ``prometheus_client``. Labels are step, workflow and signal names and
error classes: all named in code, never run ids, so their number stays bounded.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from perdure._records import EventKind, NewEvent, RunInfo, RunStatus

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from perdure._backend import Backend
    from perdure._semantics.observe import DriveStart

#: Runs one ``refresh`` reads (the console's list window).
WINDOW = 2000
_STEP_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_WAIT_SECONDS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400)
_STORE_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        self.registry = REGISTRY
        self.steps = Counter(
            "perdure_steps",
            "Steps that ended, by step name and outcome (completed, failed).",
            ["step", "outcome"],
        )
        self.step_duration = Histogram(
            "perdure_step_duration_seconds",
            "Duration of the last attempt of each completed step.",
            ["step"],
            buckets=_STEP_SECONDS,
        )
        self.step_attempts = Histogram(
            "perdure_step_attempts",
            "Attempts a step took, by step name and outcome.",
            ["step", "outcome"],
            buckets=(1, 2, 3, 4, 5, 7, 10, 20),
        )
        self.attempt_failures = Counter(
            "perdure_step_attempt_failures",
            "Transient step failures followed by a retry, by step name and error class.",
            ["step", "error_class"],
        )
        self.approval_latency = Histogram(
            "perdure_signal_wait_seconds",
            "How long runs waited for a signal (approval latency for 'approval').",
            ["signal"],
            buckets=_WAIT_SECONDS,
        )
        self.intents_parked = Counter(
            "perdure_intents_parked",
            "Effects whose outcome is unknown: runs parked as needs-attention, by step name.",
            ["step"],
        )
        self.recoveries = Counter(
            "perdure_recoveries",
            "Runs taken over from a worker that died, by workflow.",
            ["workflow"],
        )
        self.drive_failures = Counter(
            "perdure_drive_failures",
            "Drives that stopped on an error, by error class and fault "
            "(transient, permanent: classified by the substrate; error: anything else).",
            ["error_class", "fault"],
        )
        self.store_round_trip = Histogram(
            "perdure_store_round_trip_seconds",
            "Time of one durable write of history (the engine's store round trip).",
            buckets=_STORE_SECONDS,
        )
        self.state = _StateCollector()
        REGISTRY.register(cast("Collector", self.state))


_metrics: _Metrics | None = None


def enable() -> bool:
    """Start counting in this process (every drive, on any backend, through the drive
    observers of ``perdure._semantics.observe``); False when ``prometheus_client`` is
    missing."""
    global _metrics
    if _metrics is None:
        try:
            _metrics = _Metrics()
        except ImportError:
            return False
        from perdure._semantics import observe

        observe.register(_observe)
    return True


class _DriveFigures:
    """The drive observer of the metrics: what each append records, failed drives."""

    def appended(self, events: Sequence[NewEvent], seconds: float) -> None:
        observe_append(events, seconds)

    def ended(self, outcome: str, error: BaseException | None) -> None:
        if error is not None:
            observe_drive_failure(error)


_FIGURES = _DriveFigures()


def _observe(start: DriveStart) -> _DriveFigures:
    return _FIGURES


# -- what the engine reports ----------------------------------------------------------------


def observe_append(events: Sequence[NewEvent], seconds: float) -> None:
    """One batch of history was written in ``seconds``: count what it records."""
    m = _metrics
    if m is None:
        return
    m.store_round_trip.observe(seconds)
    for ev in events:
        data: dict[str, Any] = ev.data if isinstance(ev.data, dict) else {}  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
        step = ev.name or "?"
        if ev.kind is EventKind.STEP_COMPLETED:
            m.steps.labels(step, "completed").inc()
            m.step_attempts.labels(step, "completed").observe(_number(data.get("attempt"), 1))
            if isinstance(data.get("duration"), int | float):
                m.step_duration.labels(step).observe(float(data["duration"]))
        elif ev.kind is EventKind.STEP_FAILED:
            m.steps.labels(step, "failed").inc()
            m.step_attempts.labels(step, "failed").observe(_number(data.get("attempts"), 1))
        elif ev.kind is EventKind.ATTEMPT_FAILED:
            error: dict[str, Any] = data.get("error") or {}
            m.attempt_failures.labels(step, str(error.get("type", "Error"))).inc()
        elif ev.kind is EventKind.SIGNAL_RECEIVED and isinstance(data.get("waited"), int | float):
            m.approval_latency.labels(step).observe(float(data["waited"]))
        elif ev.kind is EventKind.NEEDS_ATTENTION and data.get("reason") == "unknown-outcome":
            m.intents_parked.labels(step).inc()


def observe_recovery(workflow: str) -> None:
    if _metrics is not None:
        _metrics.recoveries.labels(workflow).inc()


def observe_drive_failure(exc: BaseException) -> None:
    """A drive stopped on ``exc``; a substrate fault is counted by the error inside it
    (``error``) and its classification (``fault``: transient, permanent)."""
    if _metrics is None:
        return
    inner = getattr(exc, "error", None)
    cause = inner if isinstance(inner, BaseException) else exc
    fault = getattr(exc, "fault", None)
    _metrics.drive_failures.labels(
        type(cause).__name__, fault if isinstance(fault, str) else "error"
    ).inc()


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) else default


# -- what the backend holds -----------------------------------------------------------------


class _StateCollector:
    """Gauges of the backend's runs as of the last ``refresh``."""

    def __init__(self) -> None:
        self.runs: list[RunInfo] = []
        self.at = time.time()

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        by_status = GaugeMetricFamily(
            "perdure_runs", "Runs by status and workflow.", labels=["status", "workflow"]
        )
        tally = Tally((info.status.value, info.workflow) for info in self.runs)
        for (status, workflow), n in sorted(tally.items()):
            by_status.add_metric([status, workflow], n)
        waiting = GaugeMetricFamily(
            "perdure_suspended_runs",
            "Suspended runs by the signal they wait for.",
            labels=["signal"],
        )
        oldest = GaugeMetricFamily(
            "perdure_suspended_oldest_age_seconds",
            "How long the oldest suspended run waiting for each signal has waited.",
            labels=["signal"],
        )
        ages: dict[str, list[float]] = {}
        for info in self.runs:
            if info.status is RunStatus.SUSPENDED and info.waiting_for is not None:
                ages.setdefault(info.waiting_for, []).append(self.at - info.updated_at)
        for signal, values in sorted(ages.items()):
            waiting.add_metric([signal], len(values))
            oldest.add_metric([signal], max(0.0, max(values)))
        attention = GaugeMetricFamily(
            "perdure_needs_attention_oldest_age_seconds",
            "How long the oldest run in needs-attention has waited for someone.",
        )
        parked = [
            self.at - i.updated_at for i in self.runs if i.status is RunStatus.NEEDS_ATTENTION
        ]
        attention.add_metric([], max(parked, default=0.0))
        return [by_status, waiting, oldest, attention]


async def refresh(backend: Backend) -> None:
    """Read the backend's runs (one list query) for the state gauges."""
    if _metrics is None:
        return
    runs = await backend.list_runs(limit=WINDOW)
    _metrics.state.runs = runs
    _metrics.state.at = time.time()


async def exposition(backend: Backend) -> tuple[bytes, str]:
    """The text a Prometheus scrape gets: state refreshed from ``backend``, then all."""
    if not enable():
        return (
            b"# prometheus_client is not installed: pip install 'perdure[metrics]'\n",
            "text/plain",
        )
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    await refresh(backend)
    assert _metrics is not None
    return generate_latest(_metrics.registry), CONTENT_TYPE_LATEST


def serve_http(port: int, host: str = "127.0.0.1") -> None:
    """Expose this process's metrics on ``http://host:port/metrics`` (a thread)."""
    if not enable():
        raise ImportError("perdure metrics need prometheus_client: pip install 'perdure[metrics]'")
    from prometheus_client import start_http_server

    start_http_server(port, addr=host)
