"""Scale of the embedded engine in one process: many concurrent I/O-bound runs, and long
histories.

    uv run python -m benchmarks.scale [--runs 10,100,1000,10000] [--steps 5]
        [--latency 0.02] [--histories 10,100,1000] [--stores sqlite,postgresql]
        [--repeat 1] [--json PATH]

* Concurrency: ``R`` runs of ``bench_io`` (``--steps`` steps, each awaiting
  ``asyncio.sleep(latency)``, a simulated model call) started together with
  ``asyncio.gather`` in one process and awaited through their handles. Reported: wall
  time against the ideal (``steps x latency``, what the runs would take with free
  durability and scheduling), CPU time per step (the process's CPU seconds / (R x
  steps): the engine's cost per step at that run count) and peak memory (the
  process's peak RSS, and its growth over the RSS before the first start, per run).
* History length: one run of ``N`` trivial steps: mean cost per step, and the marginal
  cost of the last 10 % of steps (how a step's cost grows with the history before it).

Every point runs in a fresh child process (so peak RSS is that point's alone) on a
fresh database: a new SQLite file, or a new PostgreSQL schema dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._results import Figure, Target, add_json_argument, write_json

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 300
PG_BASE = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parent.parent
#: DESIGN.md: "1,000 concurrent runs in one process, I/O-bound, near the ideal wall time";
#: "near" read here as within 1.5x of the ideal.
NEAR_IDEAL = Target("ratio", 1.5, "near ideal (<= 1.5x, our reading)")


def _maxrss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux: KB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- children ----------------------------------------------------------------------------


async def child_concurrency(url: str, runs: int, steps: int, latency: float) -> dict[str, Any]:
    """One concurrency point, in this (fresh) process."""
    from benchmarks import bench_workflows
    from perdure._registry import open_backend

    backend = open_backend(url)
    await backend.open()
    try:
        rss0 = _maxrss_mb()
        cpu0, t0 = time.process_time(), time.perf_counter()
        handles = await asyncio.gather(
            *(
                backend.start(bench_workflows.io_run, (steps, latency), {}, run_id=uuid.uuid4().hex)
                for _ in range(runs)
            )
        )
        started = time.perf_counter() - t0
        results = await asyncio.gather(*(h.result() for h in handles))
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        await backend.close()
    assert results == [sum(range(steps))] * runs
    rss1 = _maxrss_mb()
    return {
        "wall": wall,
        "started": started,
        "cpu": cpu,
        "rss_before": rss0,
        "rss_peak": rss1,
    }


async def child_history(url: str, n: int) -> dict[str, Any]:
    """One history-length point, in this (fresh) process."""
    from benchmarks import bench_workflows
    from perdure._registry import open_backend

    backend = open_backend(url)
    await backend.open()
    try:
        bench_workflows.STAMPS.clear()
        t0 = time.perf_counter()
        handle = await backend.start(bench_workflows.stamped, (n,), {}, run_id=uuid.uuid4().hex)
        await handle.result()
        elapsed = time.perf_counter() - t0
    finally:
        await backend.close()
    stamps = bench_workflows.STAMPS
    tail = max(1, len(stamps) // 10)
    marginal = (stamps[-1] - stamps[-1 - tail]) / tail if len(stamps) > tail else elapsed / n
    return {"mean": elapsed / n, "marginal": marginal}


# -- parent ------------------------------------------------------------------------------


class Stores:
    """A fresh database URL per point; PostgreSQL schemas are dropped on close."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="perdure-scale-"))
        self.schemas: list[str] = []

    def url(self, store: str) -> str:
        name = uuid.uuid4().hex[:10]
        if store == "sqlite":
            return f"sqlite:///{self.tmp / name}.db"
        schema = f"perdure_scale_{name}"
        self.schemas.append(schema)
        return f"{PG_BASE}{'&' if '?' in PG_BASE else '?'}schema={schema}"

    def close(self) -> None:
        import shutil

        import psycopg

        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.schemas:
            with psycopg.connect(PG_BASE, autocommit=True, connect_timeout=5) as conn:
                for schema in self.schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def _child(*argv: str, timeout: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--child", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"scale child {argv} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(ns: argparse.Namespace) -> list[Figure]:
    """Every point; print a table, return the figures."""
    figures: list[Figure] = []
    stores = Stores()
    ideal = ns.steps * ns.latency
    runs_list = [int(x) for x in ns.runs.split(",") if x]
    histories = [int(x) for x in ns.histories.split(",") if x]
    try:
        print(
            f"\nconcurrency: R runs x {ns.steps} steps x {ns.latency * 1e3:.0f} ms "
            f"simulated latency, one process (ideal wall {ideal * 1e3:.0f} ms)\n"
        )
        print(
            f"{'store':11} {'runs':>6} {'wall ms':>9} {'x ideal':>8} {'start ms':>9} "
            f"{'cpu µs/step':>12} {'peak MB':>8} {'KB/run':>8}"
        )
        for store in ns.stores.split(","):
            for runs in runs_list:
                points = [
                    _child(
                        "concurrency",
                        stores.url(store),
                        str(runs),
                        str(ns.steps),
                        str(ns.latency),
                        timeout=ns.timeout,
                    )
                    for _ in range(ns.repeat)
                ]
                med = {k: statistics.median(p[k] for p in points) for k in points[0]}
                per_run_kb = (med["rss_peak"] - med["rss_before"]) * 1024 / runs
                cpu_step = med["cpu"] / (runs * ns.steps) * 1e6
                print(
                    f"{store:11} {runs:>6} {med['wall'] * 1e3:>9.0f} {med['wall'] / ideal:>7.2f}x "
                    f"{med['started'] * 1e3:>9.0f} {cpu_step:>12.0f} {med['rss_peak']:>8.0f} "
                    f"{per_run_kb:>8.1f}",
                    flush=True,
                )
                settings = (
                    f"{runs} runs x {ns.steps} steps x {ns.latency * 1e3:.0f} ms sleep, one "
                    f"process, embedded engine on {store}, started together (asyncio.gather)"
                )
                params = {"store": store, "runs": runs, "steps": ns.steps}
                figures += [
                    Figure(
                        f"scale.wall.{store}.r{runs}",
                        "scale",
                        f"wall time, {runs} concurrent runs, {store}",
                        "ms",
                        [p["wall"] * 1e3 for p in points],
                        anchor=f"ideal ({ns.steps} x {ns.latency * 1e3:.0f} ms)",
                        anchor_samples=[ideal * 1e3] * len(points),
                        settings=settings,
                        target=NEAR_IDEAL if runs == 1000 else None,
                        series=f"wall/ideal {store}",
                        x=runs,
                        params=params,
                    ),
                    Figure(
                        f"scale.cpu.{store}.r{runs}",
                        "scale",
                        f"CPU per step, {runs} concurrent runs, {store}",
                        "µs/step",
                        [p["cpu"] / (runs * ns.steps) * 1e6 for p in points],
                        settings=settings,
                        series=f"cpu {store}",
                        x=runs,
                        params=params,
                    ),
                    Figure(
                        f"scale.rss.{store}.r{runs}",
                        "scale",
                        f"peak RSS, {runs} concurrent runs, {store}",
                        "MB",
                        [p["rss_peak"] for p in points],
                        settings=f"{settings}; RSS before the first start "
                        f"{med['rss_before']:.0f} MB",
                        series=f"rss {store}",
                        x=runs,
                        params={**params, "kb_per_run": per_run_kb},
                    ),
                ]
        print("\nhistory length: one run of N trivial steps\n")
        print(f"{'store':11} {'steps':>6} {'mean µs/step':>13} {'last 10% µs/step':>17}")
        for store in ns.stores.split(","):
            for n in histories:
                points = [
                    _child("history", stores.url(store), str(n), timeout=ns.timeout)
                    for _ in range(ns.repeat)
                ]
                mean = statistics.median(p["mean"] for p in points)
                marginal = statistics.median(p["marginal"] for p in points)
                print(f"{store:11} {n:>6} {mean * 1e6:>13.0f} {marginal * 1e6:>17.0f}", flush=True)
                params = {"store": store, "history": n}
                settings = (
                    f"one run of {n} trivial steps, embedded engine on {store}; the mean "
                    "includes starting the run and reading its result"
                )
                figures += [
                    Figure(
                        f"scale.history.mean.{store}.h{n}",
                        "scale",
                        f"mean per-step cost, {n}-step run, {store}",
                        "µs/step",
                        [p["mean"] * 1e6 for p in points],
                        settings=settings,
                        series=f"history mean {store}",
                        x=n,
                        params=params,
                    ),
                    Figure(
                        f"scale.history.tail.{store}.h{n}",
                        "scale",
                        f"per-step cost of the last 10% of a {n}-step run, {store}",
                        "µs/step",
                        [p["marginal"] * 1e6 for p in points],
                        settings=settings,
                        series=f"history last10% {store}",
                        x=n,
                        params=params,
                    ),
                ]
    finally:
        stores.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="10,100,1000,10000", help="concurrent run counts")
    parser.add_argument("--steps", type=int, default=5, help="steps per concurrent run")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per step")
    parser.add_argument("--histories", default="10,100,1000", help="history lengths")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=1, help="repeats per point")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per point")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    add_json_argument(parser)
    ns = parser.parse_args()
    if ns.child:
        kind, url, *rest = ns.child
        if kind == "concurrency":
            got = asyncio.run(child_concurrency(url, int(rest[0]), int(rest[1]), float(rest[2])))
        else:
            got = asyncio.run(child_history(url, int(rest[0])))
        print(json.dumps(got))
        return
    write_json(ns.json, measure(ns))


if __name__ == "__main__":
    main()
