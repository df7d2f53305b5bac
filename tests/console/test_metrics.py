"""Prometheus figures scraped during a run match the run's history: the console's
/metrics counts what the backend holds, a worker's --metrics-port what it drove. On
every column: the figures come from the drive observers of ``perdure._semantics``, so a
backend driving through the shared semantics is counted without code of its own."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_support import SCRAPE, ConsoleProcess, free_port
from prometheus_client.parser import text_string_to_metric_families

from perdure._backend import Backend
from perdure._records import Event, EventKind, RunStatus
from perdure.testing import Patience
from perdure.testing.processes import Process, Processes

HERE = Path(__file__).parent
WORKFLOW = "console_workflows:refund"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def value(figures: dict[Any, float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in figures, f"no sample {name}{labels}; have {sorted(k for k, _ in figures)}"
    return figures[key]


async def held_when(
    console: ConsoleProcess, deadline: float, name: str, want: float, **labels: str
) -> dict[Any, float]:
    """The console's figures once ``name{labels}`` reads ``want``: a backend's list may
    trail its writes (Temporal's visibility is eventually consistent)."""
    async with httpx.AsyncClient(timeout=30) as client:
        while True:
            scraped = await client.get(f"{console.base}/metrics", headers=SCRAPE)
            held = samples(scraped.raise_for_status().text)
            if held.get((name, frozenset(labels.items()))) == want:
                return held
            assert time.monotonic() < deadline, f"{name}{labels} never read {want}: {held}"
            await asyncio.sleep(0.2)  # paces the scrapes while the backend's list catches up


def scrape_when_up(url: str, deadline: float) -> str:
    """GET ``url`` once its server listens (the worker process is starting)."""
    with httpx.Client(timeout=5.0) as client:
        while True:
            try:
                return client.get(url).raise_for_status().text
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)  # a refused connection returns at once: pace the retries


def metrics_worker(procs: Processes, url: str) -> tuple[Process, str]:
    """A `perdure worker` with --metrics-port, and the URL of its /metrics once it serves."""
    port = free_port()
    worker = procs.spawn(
        "-m", "perdure", "worker", "console_workflows", "--url", url, "--metrics-port", str(port)
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    scrape_when_up(metrics, time.monotonic() + 60)
    return worker, metrics


async def test_scraped_figures_match_the_history(
    perdure_backend: Backend, perdure_url: str, console: ConsoleProcess
) -> None:
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    procs = Processes(perdure_url, pythonpath=[HERE])
    try:
        first = procs.drive("console_workflows", WORKFLOW, "order-5", 700, run_id=run_id)
        assert first.wait() == 0, first.output()
        suspended = await perdure_backend.get_run(run_id)
        assert suspended.status is RunStatus.SUSPENDED

        # the console's /metrics: what the backend holds, read at scrape time
        before = time.time()
        held = await held_when(
            console, time.monotonic() + 60, "perdure_suspended_runs", 1, signal="approval"
        )
        after = time.time()
        assert value(held, "perdure_runs", status="suspended", workflow=WORKFLOW) == 1
        assert value(held, "perdure_suspended_runs", signal="approval") == 1
        oldest = value(held, "perdure_suspended_oldest_age_seconds", signal="approval")
        assert before - suspended.updated_at - 1 <= oldest <= after - suspended.updated_at + 1

        # a worker with --metrics-port resumes the run once it is approved
        worker, worker_metrics = metrics_worker(procs, perdure_url)
        await perdure_backend.signal(run_id, "approval", {"approved": True}, by="ops")
        done = await perdure_backend.wait(run_id, timeout=120, drive=False)
        assert done.status is RunStatus.SUCCEEDED, worker.output()

        drove = samples(scrape_when_up(worker_metrics, time.monotonic() + 30))
        events = await perdure_backend.history(run_id)
        paid = next(e for e in events if e.kind is EventKind.STEP_COMPLETED and e.name == "pay_out")
        signal = next(e for e in events if e.kind is EventKind.SIGNAL_RECEIVED)
        assert value(drove, "perdure_steps_total", step="pay_out", outcome="completed") == 1
        assert value(drove, "perdure_step_duration_seconds_count", step="pay_out") == 1
        assert value(drove, "perdure_step_duration_seconds_sum", step="pay_out") == pytest.approx(
            paid.data["duration"], abs=1e-6
        )
        assert value(drove, "perdure_step_attempts_sum", step="pay_out", outcome="completed") == 1
        assert value(drove, "perdure_signal_wait_seconds_count", signal="approval") == 1
        assert value(drove, "perdure_signal_wait_seconds_sum", signal="approval") == pytest.approx(
            signal.data["waited"], abs=1e-6
        )
        # the quote step ran in the first process: this worker did not count it
        assert (
            "perdure_steps_total",
            frozenset({("step", "quote"), ("outcome", "completed")}),
        ) not in drove
        # writes: signal + step + end at least, each timed
        assert value(drove, "perdure_store_round_trip_seconds_count") >= 2
        text = json.dumps(sorted(str(k) for k in drove))
        assert run_id not in text, "no run id may be a label"
    finally:
        procs.close()


@pytest.mark.perdure_not_on(
    "dbos+sqlite",
    "dbos+postgresql",
    reason="perdure_dbos does not report drives to core's drive observers yet "
    "(DBOS metrics are #16's), so its worker counts nothing",
)
async def test_an_intent_parked_by_a_worker_is_counted_as_the_history_records(
    perdure_backend: Backend, perdure_url: str
) -> None:
    run_id = f"transfer-{uuid.uuid4().hex[:8]}"
    procs = Processes(perdure_url, pythonpath=[HERE])
    try:
        first = procs.drive(
            "console_workflows", "console_workflows:transfer", "o-9", 900, run_id=run_id
        )
        assert first.wait() == 0, first.output()
        parked = await perdure_backend.get_run(run_id)
        assert parked.status is RunStatus.NEEDS_ATTENTION, parked

        worker, worker_metrics = metrics_worker(procs, perdure_url)
        # "retry": the operator says the wire never went out; the worker sends it again,
        # its outcome is unknown again, and the run parks again, this time in the worker
        await perdure_backend.reconcile(run_id, "1:wire", "retry", by="ops")
        events = await parked_again(perdure_backend, run_id, Patience(120), worker)

        drove = samples(scrape_when_up(worker_metrics, time.monotonic() + 30))
        since = next(i for i, e in enumerate(events) if e.kind is EventKind.RECONCILED)
        after = [e for e in events[since:] if e.kind is EventKind.NEEDS_ATTENTION]
        assert [e.data["reason"] for e in after] == ["unknown-outcome"]
        step = after[0].name or "?"
        assert value(drove, "perdure_intents_parked_total", step=step) == len(after)
        assert (
            "perdure_steps_total",
            frozenset({("step", "wire"), ("outcome", "completed")}),
        ) not in drove
    finally:
        procs.close()


async def parked_again(
    backend: Backend, run_id: str, patience: Patience, worker: Any
) -> list[Event]:
    """The run's history once it parked a second time (a worker drives it meanwhile)."""
    while True:
        events = list(await backend.history(run_id))
        parks = sum(1 for e in events if e.kind is EventKind.NEEDS_ATTENTION)
        if parks == 2 and (await backend.get_run(run_id)).status is RunStatus.NEEDS_ATTENTION:
            return events
        patience.observe(len(events))
        assert not patience.expired(), f"the run did not park again: {events}\n{worker.output()}"
        await asyncio.sleep(0.2)  # paces the reads while the worker drives the run
