"""OpenTelemetry spans: one per drive and per step, carrying run ids and no payloads;
a run resumed by another backend (a worker, after an approval) continues the trace
that started it, through the trace context stored in the run record. On every column:
the spans come from the drive observers of ``perdure._semantics``."""

from __future__ import annotations

import uuid

from console_workflows import refund
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from perdure._records import RunStatus
from perdure._registry import open_backend

EXPORTER = InMemorySpanExporter()


def _provider() -> None:
    """One SDK provider for this test process (OpenTelemetry allows setting it once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)


def spans_of(run_id: str) -> list[ReadableSpan]:
    return [
        s
        for s in EXPORTER.get_finished_spans()
        if (s.attributes or {}).get("perdure.run_id") == run_id
    ]


async def test_drive_and_step_spans_continue_one_trace_across_backends(
    perdure_url: str,
) -> None:
    _provider()
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    starter = open_backend(perdure_url)
    await starter.open()
    tracer = trace.get_tracer("test")
    try:
        with tracer.start_as_current_span("http request") as request:
            await starter.start(refund, ("order-42", 1299), {}, run_id=run_id)
        await starter.idle()
        assert (await starter.get_run(run_id)).status is RunStatus.SUSPENDED
    finally:
        await starter.close()
    trace_id = request.get_span_context().trace_id

    # another backend (as a worker would be) drives the rest, from the stored context
    worker = open_backend(perdure_url)
    await worker.open()
    try:
        info = await worker.get_run(run_id)
        assert "traceparent" in info.details
        await worker.signal(run_id, "approval", {"approved": True}, by="ops")
        done = await worker.wait(run_id, timeout=60)
        assert done.status is RunStatus.SUCCEEDED
    finally:
        await worker.close()

    spans = spans_of(run_id)
    drives = [s for s in spans if s.name == "perdure.drive"]
    steps = [s for s in spans if s.name == "perdure.step"]
    assert len(drives) == 2
    assert {s.context.trace_id for s in spans} == {trace_id}
    (root,) = [s for s in spans if s.name == "perdure.run"]
    assert root.parent is not None and root.parent.span_id == request.get_span_context().span_id
    assert all(d.parent is not None and d.parent.span_id == root.context.span_id for d in drives)
    assert [d.attributes["perdure.outcome"] for d in drives] == ["suspended", "succeeded"]
    by_step = {s.attributes["perdure.step"]: s for s in steps}
    assert set(by_step) == {"1:quote", "3:pay_out"}
    assert by_step["1:quote"].parent.span_id == drives[0].context.span_id
    assert by_step["3:pay_out"].parent.span_id == drives[1].context.span_id
    for s in steps:
        assert s.attributes["perdure.attempt"] == 1
        assert s.attributes["perdure.outcome"] == "completed"
    # payloads stay in the history: no input, argument or result in any span
    shown = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
    assert "order-42" not in shown and "1299" not in shown
