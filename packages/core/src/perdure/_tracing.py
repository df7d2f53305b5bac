"""OpenTelemetry spans of drives and steps (``perdure[otel]``; a no-op without it).

One span per drive of a run (``perdure.drive``) and one per step attempt that ended
(``perdure.step``), with ``perdure.run_id``, ``perdure.step``, ``perdure.attempt`` and
``perdure.outcome`` attributes. Payloads never go into spans: a span names the run, and
the run's history has the data.

A run carries its trace: ``start`` records the W3C ``traceparent`` of the span that
started it in the run record (``RunInfo.details``), and every drive, in whichever
process, is a child of it, so a run a worker resumes days later continues the trace
that started it. Without an SDK configured the OpenTelemetry API is itself a no-op.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perdure._records import EventKind, NewEvent

if TYPE_CHECKING:
    from perdure._semantics.observe import DriveStart

_HAVE_OTEL = importlib.util.find_spec("opentelemetry") is not None

TRACEPARENT = "traceparent"
_OUTCOMES = {
    EventKind.STEP_COMPLETED: "completed",
    EventKind.STEP_FAILED: "failed",
    EventKind.ATTEMPT_FAILED: "retried",
}


def observe(start: DriveStart) -> DriveSpan | None:
    """The drive observer (``perdure._semantics.observe``): a span for each drive that an
    OpenTelemetry SDK records, None when none does."""
    if not _HAVE_OTEL:
        return None
    span = DriveSpan(start.run_id, start.workflow, start.details)
    return span if span.recording else None


def start_context(run_id: str, workflow: str) -> dict[str, Any]:
    """What a new run records of its trace: ``{"traceparent": ...}`` of a short
    ``perdure.run`` span (a child of the caller's span, if any), or ``{}`` when no
    OpenTelemetry SDK records spans."""
    if not _HAVE_OTEL:
        return {}
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    span = trace.get_tracer("perdure").start_span(
        "perdure.run",
        kind=SpanKind.INTERNAL,
        attributes={"perdure.run_id": run_id, "perdure.workflow": workflow},
    )
    span.end()
    if not span.get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return {TRACEPARENT: carrier[TRACEPARENT]} if TRACEPARENT in carrier else {}


class DriveSpan:
    """The span of one drive; step spans are created from the history it writes."""

    def __init__(self, run_id: str, workflow: str, details: Mapping[str, Any]) -> None:
        self.run_id = run_id
        self._span: Any = None
        self._token: Any = None
        if not _HAVE_OTEL:
            return
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace import Span, SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent_ctx = None
        traceparent = details.get(TRACEPARENT)
        if isinstance(traceparent, str):
            parent_ctx = TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent})
        tracer = trace.get_tracer("perdure")
        span: Span = tracer.start_span(
            "perdure.drive",
            context=parent_ctx,
            kind=SpanKind.INTERNAL,
            attributes={"perdure.run_id": run_id, "perdure.workflow": workflow},
        )
        if not span.is_recording():
            return  # no SDK (or not sampled): nothing to nest under or to end
        self._span = span
        # The workflow's own spans (a framework's tracing) nest under the drive.
        self._token = otel_context.attach(trace.set_span_in_context(span))

    @property
    def recording(self) -> bool:
        return self._span is not None

    def appended(self, events: Sequence[NewEvent], seconds: float = 0.0) -> None:
        span = self._span
        if span is None:
            return
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        now = time.time_ns()
        parent = trace.set_span_in_context(span)
        tracer = trace.get_tracer("perdure")
        for ev in events:
            outcome = _OUTCOMES.get(ev.kind)
            if outcome is None:
                continue
            data: dict[str, Any] = ev.data if isinstance(ev.data, dict) else {}  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
            attempt = data.get("attempt", data.get("attempts", 1))
            duration = data.get("duration")
            start = now - int(float(duration) * 1e9) if isinstance(duration, int | float) else now
            step = tracer.start_span(
                "perdure.step",
                context=parent,
                start_time=start,
                attributes={
                    "perdure.run_id": self.run_id,
                    "perdure.step": ev.step_key or "",
                    "perdure.step.name": ev.name or "",
                    "perdure.step.kind": str(data.get("kind", "step")),
                    "perdure.attempt": int(attempt) if isinstance(attempt, int) else 1,
                    "perdure.outcome": outcome,
                },
            )
            if outcome != "completed":
                error: dict[str, Any] = data.get("error") or {}
                step.set_status(Status(StatusCode.ERROR, str(error.get("type", "Error"))))
            step.end(end_time=now)

    def ended(self, outcome: str, error: BaseException | None = None) -> None:
        span = self._span
        if span is None:
            return
        from opentelemetry import context as otel_context
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("perdure.outcome", outcome)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()
        otel_context.detach(self._token)
        self._span = None
