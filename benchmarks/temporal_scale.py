"""perdure on Temporal at scale, against bare Temporal on the same dev server.

    uv run python -m benchmarks.temporal_scale [--runs 1000] [--large-pairs 2]
                                               [--batch 200] [--pairs 4]
                                               [--steps 5] [--io-ms 20]
                                               [--idle-runs 100] [--idle-seconds 30]
                                               [--quick] [--json PATH]

* concurrency: batches of runs started at once from one process, each ``--steps``
  sequential steps of ``--io-ms`` of I/O (``asyncio.sleep``), perdure on ``temporal://``
  against the same work as bare Temporal workflows of activities; wall time from the
  first start to the last result, and failed runs (target: 0 failed, within 1.5x).
  The sides are interleaved so the ratio is fair on a shared machine: ``--pairs``
  pairs of ``--batch`` runs, then ``--large-pairs`` pairs of ``--runs``, each pair a
  bare batch and a perdure batch back to back, the side going first alternating; the
  ratio is taken pair by pair (median [min-max]);
* idle: ``--idle-runs`` runs suspended on a signal, one caller waiting on each
  (``backend.wait``), for ``--idle-seconds``: history events the runs gained and the
  server's own request counters (its Prometheus ``service_requests``) per operation and
  second — queries, updates, visibility lists, describes (target: 0/s).

The dev server is started here (``perdure_temporal.devserver``), every worker runs in
this process.

Both sides are started and awaited alike, as a Temporal user running 1,000 workflows
at once would: a start or a result whose RPC meets a passing server state (a timed-out
call, ``RESOURCE_EXHAUSTED`` from a loaded dev server) is sent again for up to 120 s
(``perdure_temporal.faults.ride_out``, what perdure's own start and wait do), a start
resent after a timed-out call attaches to the workflow it started
(``USE_EXISTING``), and both workflows have the same 10 s workflow-task timeout. Until
2026-12-01 the bare side called ``execute_workflow`` once, with only the client's
default retry (10 s), and counted any exception as a failed run without saying which:
under load 9-24 it lost 145 and 280 of 1,000 runs, so its wall time covered less work
than perdure's. Each side now prints why its runs failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

with workflow.unsafe.imports_passed_through():
    from benchmarks import bench_workflows
    from benchmarks._results import Figure, Target, add_json_argument, write_json
    from benchmarks._table import print_table
    from perdure import RunStatus
    from perdure._registry import open_backend
    from perdure_temporal.devserver import DevServer
    from perdure_temporal.faults import ride_out
    from perdure_temporal.workflow import TASK_TIMEOUT

SECTION = "Temporal at scale"
BARE_QUEUE = "bench-scale-bare"
CONCURRENCY_TARGET = Target("ratio", 1.5, "<= 1.5x bare activities, 0 failed")
IDLE_TARGET = Target("value", 0.0, "0 per second at idle")
#: Server operations a waiting caller or an idle worker could cost (workers' own task
#: polls are long polls that bare Temporal workers make too, shown apart).
WATCHED = (
    "QueryWorkflow",
    "UpdateWorkflowExecution",
    "PollWorkflowExecutionUpdate",
    "ListWorkflowExecutions",
    "CountWorkflowExecutions",
    "DescribeWorkflowExecution",
    "SignalWorkflowExecution",
    "GetWorkflowExecutionHistory",
)
#: Seconds the dev server takes to publish a request in its counters.
METRICS_DELAY = 3.0
_IDS = re.compile(r"[0-9a-f]{32}")
_SAMPLE = re.compile(r"^service_requests\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.e+]+)$")


@activity.defn(name="bench.io")
async def bare_io(i: int, seconds: float) -> int:
    await asyncio.sleep(seconds)
    return i


@workflow.defn(name="bench.bare_io_steps")
class BareIoSteps:
    @workflow.run
    async def run(self, n: int, seconds: float) -> int:
        total = 0
        for i in range(n):
            total += await workflow.execute_activity(
                bare_io, args=[i, seconds], start_to_close_timeout=timedelta(seconds=120)
            )
        return total


def cpu_seconds(server: DevServer) -> tuple[float, float]:
    """CPU seconds used so far by this process (every thread) and by the dev server."""
    assert server.process is not None
    with open(f"/proc/{server.process.pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # utime, stime, cutime, cstime (the server's own and its waited-for children's)
    server_s = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
    return time.process_time(), server_s


def server_requests(metrics_port: int) -> Counter[str]:
    """The dev server's request counters by operation (frontend only)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or 'service_name="frontend"' not in m["labels"]:
            continue
        op = re.search(r'operation="([^"]+)"', m["labels"])
        if op:
            out[op.group(1)] += int(float(m["value"]))
    return out


def _reason(exc: BaseException) -> str:
    """Why a run failed, without its ids (so runs that failed alike count together)."""
    return _IDS.sub("<id>", f"{type(exc).__name__}: {exc}")[:200]


async def bare_concurrent(client: Client, runs: int, steps: int, io: float) -> tuple[float, int]:
    t0 = time.perf_counter()
    failures: Counter[str] = Counter()

    async def one() -> bool:
        workflow_id = f"bare-{uuid.uuid4().hex}"
        try:
            # Started and awaited as perdure's side is: a passing server state (a
            # timed-out RPC, RESOURCE_EXHAUSTED) is ridden out for the same 120 s.
            handle = await ride_out(
                f"start of {workflow_id}",
                lambda: client.start_workflow(
                    BareIoSteps.run,
                    args=[steps, io],
                    id=workflow_id,
                    task_queue=BARE_QUEUE,
                    task_timeout=TASK_TIMEOUT,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                ),
            )
            result = await ride_out(f"result of {workflow_id}", handle.result)
            return bool(result == sum(range(steps)))
        except Exception as exc:
            failures[_reason(exc)] += 1
            return False

    ok = await asyncio.gather(*(one() for _ in range(runs)))
    for reason, n in failures.most_common(5):
        print(f"  bare runs failed ({n}): {reason}")
    return time.perf_counter() - t0, ok.count(False)


async def perdure_concurrent(backend: Any, runs: int, steps: int, io: float) -> tuple[float, int]:
    t0 = time.perf_counter()
    failures: Counter[str] = Counter()

    async def one() -> bool:
        try:
            handle = await backend.start(
                bench_workflows.io_steps, (steps, io), {}, run_id=uuid.uuid4().hex
            )
            return bool(await handle.result() == sum(range(steps)))
        except Exception as exc:
            failures[_reason(exc)] += 1
            return False

    ok = await asyncio.gather(*(one() for _ in range(runs)))
    for reason, n in failures.most_common(5):
        print(f"  perdure runs failed ({n}): {reason}")
    return time.perf_counter() - t0, ok.count(False)


async def idle(
    backend: Any, client: Client, server: DevServer, prefix: str, runs: int, seconds: float
) -> tuple[float, Counter[str], Counter[str]]:
    """(history events gained per second, watched requests/s, other requests/s)."""
    ids = [uuid.uuid4().hex for _ in range(runs)]
    for run_id in ids:
        await backend.start(bench_workflows.waits, (), {}, run_id=run_id)
    await backend.idle()
    for run_id in ids:
        assert (await backend.get_run(run_id)).status is RunStatus.SUSPENDED
    waiters = [asyncio.ensure_future(backend.wait(run_id)) for run_id in ids]
    await asyncio.sleep(2)  # every waiter has made its first read and is long-polling

    async def history_length() -> int:
        total = 0
        for run_id in ids:
            desc = await client.get_workflow_handle(f"{prefix}{run_id}").describe()
            total += desc.history_length
        return total

    before_events = await history_length()
    # The server publishes its counters a moment late: let our own describes land first.
    await asyncio.sleep(METRICS_DELAY)
    before = server_requests(server.metrics_port)
    await asyncio.sleep(seconds)
    after = server_requests(server.metrics_port)
    gained = (await history_length()) - before_events
    delta = after - before
    watched = Counter({op: delta[op] / seconds for op in WATCHED if delta[op]})
    other = Counter({op: n / seconds for op, n in delta.items() if op not in WATCHED})
    for run_id in ids:  # let them finish: the waiters return
        await backend.signal(run_id, "go", 1)
    await asyncio.gather(*waiters)
    return gained / seconds, watched, other


@dataclass
class Side:
    """One side's batches of one size: wall time and failures per batch, and the dev
    server's requests and the CPU of this process and of the server, summed."""

    walls: list[float] = field(default_factory=list[float])
    failed: list[int] = field(default_factory=list[int])
    ops: Counter[str] = field(default_factory=Counter[str])
    cpu: list[float] = field(default_factory=lambda: [0.0, 0.0])

    async def measure(self, server: DevServer, batch: Awaitable[tuple[float, int]]) -> None:
        """Await ``batch`` (not started yet) -> (wall s, failed); add what it cost."""
        before, cpu0 = server_requests(server.metrics_port), cpu_seconds(server)
        wall, failed = await batch
        cpu1 = cpu_seconds(server)
        await asyncio.sleep(METRICS_DELAY)  # the server publishes its counters late
        self.ops += server_requests(server.metrics_port) - before
        self.cpu[0] += cpu1[0] - cpu0[0]
        self.cpu[1] += cpu1[1] - cpu0[1]
        self.walls.append(wall)
        self.failed.append(failed)


def schedule(runs: int, batch: int, pairs: int, large_pairs: int = 1) -> list[int]:
    """The batch sizes, in order: ``pairs`` batches of ``batch`` runs, then
    ``large_pairs`` of ``runs`` (each batch is a bare and a perdure side, see
    ``concurrency``)."""
    sizes = [batch] * pairs if 0 < batch < runs else []
    return [*sizes, *[runs] * max(large_pairs, 1)]


def spread(xs: Sequence[float], fmt: str = ".1f") -> str:
    if len(xs) == 1:
        return f"{xs[0]:{fmt}}"
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"


async def concurrency(
    client: Client, backend: Any, server: DevServer, sizes: Sequence[int], steps: int, io: float
) -> dict[int, dict[str, Side]]:
    """Each batch of ``sizes`` on both sides back to back, the side that goes first
    alternating from batch to batch, so both see the same load on a shared machine
    and neither always runs on a server the other just warmed."""
    out: dict[int, dict[str, Side]] = {}
    for i, runs in enumerate(sizes):
        sides = out.setdefault(runs, {"bare": Side(), "perdure": Side()})
        order = ("bare", "perdure") if i % 2 == 0 else ("perdure", "bare")
        for name in order:
            batch = (
                bare_concurrent(client, runs, steps, io)
                if name == "bare"
                else perdure_concurrent(backend, runs, steps, io)
            )
            await sides[name].measure(server, batch)
        bare, ours = sides["bare"], sides["perdure"]
        print(
            f"  batch {i + 1}/{len(sizes)}: {runs} runs, {' then '.join(order)}: bare "
            f"{bare.walls[-1]:.1f} s ({bare.failed[-1]} failed), perdure {ours.walls[-1]:.1f} s "
            f"({ours.failed[-1]} failed), {ours.walls[-1] / bare.walls[-1]:.2f}x",
            flush=True,
        )
    return out


def concurrency_report(
    results: dict[int, dict[str, Side]], steps: int, io_ms: float
) -> list[Figure]:
    """Print the per-size tables; the figures (the largest size is
    ``temporal.scale.concurrent``)."""
    figures: list[Figure] = []
    largest = max(results)
    for runs, sides in sorted(results.items()):
        bare, ours = sides["bare"], sides["perdure"]
        n = len(ours.walls)
        done = runs * n
        ratios = [o / b for o, b in zip(ours.walls, bare.walls, strict=True)]
        rows = [
            ["wall time, bare Temporal activities", spread(bare.walls), "s"],
            ["wall time, perdure on temporal://", spread(ours.walls), "s"],
            ["ratio perdure / bare, pair by pair", spread(ratios, ".2f"), "x (target <= 1.5x)"],
            ["failed runs, bare | perdure", f"{sum(bare.failed)} | {sum(ours.failed)}", ""],
            [
                "CPU ms per run, process, bare | perdure",
                f"{bare.cpu[0] * 1e3 / done:.1f} | {ours.cpu[0] * 1e3 / done:.1f}",
                "",
            ],
            [
                "CPU ms per run, dev server, bare | perdure",
                f"{bare.cpu[1] * 1e3 / done:.1f} | {ours.cpu[1] * 1e3 / done:.1f}",
                "",
            ],
            ["dev server requests per run, bare | perdure:", "", ""],
            *(
                [f"  {op}",
                 f"{bare.ops[op] / done:.1f} | {ours.ops[op] / done:.1f}", ""]
                for op in sorted(set(bare.ops) | set(ours.ops))
                if bare.ops[op] or ours.ops[op]
            ),
        ]  # fmt: skip
        print_table(
            f"{runs} concurrent runs x {steps} steps x {io_ms:g} ms I/O, one process, "
            f"{n} interleaved pair{'s' if n > 1 else ''}",
            ["", "median [min-max]", ""],
            rows,
            [48, 22, 0],
            align="<><",
        )
        settings = (
            f"{runs} runs started at once from one process, {steps} sequential steps of "
            f"{io_ms:g} ms asyncio.sleep each; workers in-process, one dev server; {n} "
            f"pair(s) of batches, the side going first alternating; failed: perdure "
            f"{sum(ours.failed)}, bare {sum(bare.failed)} of {done} each"
        )
        key = "temporal.scale.concurrent" + ("" if runs == largest else f".{runs}")
        figures.append(
            Figure(
                key,
                SECTION,
                f"perdure on temporal://, {runs} concurrent {steps}-step runs",
                "s",
                list(ours.walls),
                anchor="bare Temporal workflows of activities",
                anchor_samples=list(bare.walls),
                settings=settings,
                target=CONCURRENCY_TARGET,
                params={
                    "runs": runs,
                    "pairs": n,
                    "failed": sum(ours.failed),
                    "bare_failed": sum(bare.failed),
                },
            )
        )
        figures.append(
            Figure(
                key.replace("concurrent", "failed"),
                SECTION,
                f"failed perdure runs of {done} ({runs} at once)",
                "runs",
                [float(sum(ours.failed))],
                anchor="failed bare runs",
                anchor_samples=[float(sum(bare.failed))],
                paired=False,
                settings=settings,
                target=Target("value", 0.0, "0 failed"),
            )
        )
    return figures


def idle_report(
    events: float, watched: Counter[str], other: Counter[str], runs: int, seconds: float
) -> list[Figure]:
    """Print the idle table; its two figures."""
    print_table(
        f"{runs} suspended runs, one caller waiting on each, {seconds:g} s",
        ["", "per second"],
        [
            ["history events gained", f"{events:.3f}"],
            *([op, f"{watched.get(op, 0.0):.3f}"] for op in WATCHED),
        ],
        [34, 10],
    )
    print(
        "  (workers' task polls, as bare Temporal workers make them: "
        + ", ".join(f"{op} {n:.2f}/s" for op, n in sorted(other.items()))
        + ")"
    )
    idle_settings = (
        f"{runs} runs suspended on wait_for_signal, one backend.wait() caller "
        f"each, {seconds:g} s window; the dev server's service_requests counters"
    )
    rpcs = sum(watched.get(op, 0.0) for op in WATCHED if op != "GetWorkflowExecutionHistory")
    return [
        Figure(
            "temporal.idle.events",
            SECTION,
            f"history events per second, {runs} idle suspended runs with waiters",
            "events/s",
            [events],
            settings=idle_settings,
            target=IDLE_TARGET,
        ),
        Figure(
            "temporal.idle.rpcs",
            SECTION,
            f"queries+updates+lists+describes per second, {runs} idle runs with waiters",
            "RPC/s",
            [rpcs],
            settings=idle_settings + "; waiters' history long polls reported apart: "
            f"{watched.get('GetWorkflowExecutionHistory', 0.0):.3f}/s",
            target=IDLE_TARGET,
        ),
    ]


async def measure(
    server: DevServer,
    sizes: Sequence[int],
    steps: int,
    io_ms: float,
    idle_runs: int,
    idle_seconds: float,
) -> list[Figure]:
    """(a) and (c) on ``server``: the concurrency pairs, then the idle window."""
    tmp = Path(tempfile.mkdtemp(prefix="perdure-bench-temporal-scale-"))
    prefix = f"s{uuid.uuid4().hex[:8]}-"
    io = io_ms / 1000
    url = server.url(task_queue="bench-scale", id_prefix=prefix, payloads=str(tmp / "p"))
    client = await Client.connect(server.target)
    backend = open_backend(url)
    await backend.open()
    stop = asyncio.Event()
    serving = asyncio.ensure_future(backend.serve(stop=stop, concurrency=max(sizes)))
    try:
        async with Worker(
            client,
            task_queue=BARE_QUEUE,
            workflows=[BareIoSteps],
            activities=[bare_io],
            workflow_runner=UnsandboxedWorkflowRunner(),
            max_concurrent_activities=max(sizes),
        ):
            await perdure_concurrent(backend, 10, steps, io)  # warm-up
            await bare_concurrent(client, 10, steps, io)
            results = await concurrency(client, backend, server, sizes, steps, io)
        figures = concurrency_report(results, steps, io_ms)
        idled = await idle(backend, client, server, prefix, idle_runs, idle_seconds)
        figures += idle_report(*idled, idle_runs, idle_seconds)
    finally:
        stop.set()
        await serving
        await backend.close()
    return figures


async def main(
    sizes: Sequence[int], steps: int, io_ms: float, idle_runs: int, idle_seconds: float
) -> list[Figure]:
    with DevServer() as server:
        return await measure(server, sizes, steps, io_ms, idle_runs, idle_seconds)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of (a) and (c), shared with ``benchmarks.temporal_all``."""
    parser.add_argument("--runs", type=int, default=1000, help="runs of the one large pair")
    parser.add_argument("--batch", type=int, default=200, help="runs of each smaller pair")
    parser.add_argument("--pairs", type=int, default=4, help="smaller pairs (0: none)")
    parser.add_argument("--large-pairs", type=int, default=2, help="pairs of --runs runs")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--io-ms", type=float, default=20.0)
    parser.add_argument("--idle-runs", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=30.0)


def quick(ns: argparse.Namespace) -> None:
    """``--quick``'s small counts."""
    ns.runs, ns.batch, ns.pairs = min(ns.runs, 50), min(ns.batch, 20), min(ns.pairs, 2)
    ns.large_pairs = 1
    ns.idle_runs, ns.idle_seconds = min(ns.idle_runs, 10), 5.0


def cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--quick", action="store_true")
    add_json_argument(parser)
    ns = parser.parse_args(argv)
    if ns.quick or os.environ.get("PERDURE_BENCH_QUICK") == "1":
        quick(ns)
    sizes = schedule(ns.runs, ns.batch, ns.pairs, ns.large_pairs)
    write_json(ns.json, asyncio.run(main(sizes, ns.steps, ns.io_ms, ns.idle_runs, ns.idle_seconds)))


if __name__ == "__main__":
    from benchmarks.temporal_scale import cli as _cli

    _cli()
