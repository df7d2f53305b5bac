"""Per-step overhead and recovery latency of the embedded engine, next to its anchors.

    uv run python -m benchmarks.engine_steps [--steps 1000] [--repeat 5] [--json PATH]

For each store, in one run: a bare single-row INSERT+commit on the same database (the
floor any durable step pays), perdure's per-step cost, their ratio, and the number of
write transactions per step; then the time from a worker's start to the first resumed
step after the previous worker was SIGKILLed, with a short and a 1,000-step history.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import bench_workflows
from benchmarks._results import Figure, Target, add_json_argument, write_json
from perdure._engine.backend import EmbeddedBackend
from perdure._registry import open_backend

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 180
PG_BASE = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parent.parent
BARE_TABLE = """CREATE TABLE IF NOT EXISTS bench_bare (run_id TEXT, seq INTEGER, kind TEXT,
    step_key TEXT, name TEXT, data TEXT, at DOUBLE PRECISION, PRIMARY KEY (run_id, seq))"""
BARE_ROW = '{"result":1,"attempt":1,"kind":"step","duration":1e-05}'


def median_spread(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), (max(xs) - min(xs)) / 2


async def bare_sqlite(path: str, synchronous: str, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(BARE_TABLE)
    run = uuid.uuid4().hex
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO bench_bare VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run, i, "step_completed", f"{i}:tick", "tick", BARE_ROW, time.time()),
        )
        conn.execute("COMMIT")
        await asyncio.sleep(0)  # same event-loop turn a durable step takes
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed / n


async def bare_postgres(url: str, n: int) -> float:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(BARE_TABLE)
        run = uuid.uuid4().hex
        t0 = time.perf_counter()
        for i in range(n):
            await conn.execute(
                "INSERT INTO bench_bare VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (run, i, "step_completed", f"{i}:tick", "tick", BARE_ROW, time.time()),
            )
        elapsed = time.perf_counter() - t0
        await conn.execute("DROP TABLE bench_bare")
    return elapsed / n


class CountingBackend:
    """Counts the store's write transactions during a run."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.writes = 0
        store = backend.store
        original = store.append

        async def append(*a: Any, **kw: Any) -> None:
            self.writes += 1
            await original(*a, **kw)

        store.append = append  # type: ignore[method-assign]


async def perdure_steps(url: str, n: int) -> tuple[float, float]:
    backend = open_backend(url)
    assert isinstance(backend, EmbeddedBackend)
    await backend.open()
    counter = CountingBackend(backend)
    try:
        t0 = time.perf_counter()
        handle = await backend.start(bench_workflows.steps, (n,), {}, run_id=uuid.uuid4().hex)
        await handle.result()
        elapsed = time.perf_counter() - t0
    finally:
        await backend.close()
    return elapsed / n, counter.writes / n


async def plain_steps(n: int) -> float:
    t0 = time.perf_counter()
    await bench_workflows.steps(n)
    return (time.perf_counter() - t0) / n


async def recovery(url: str, history: int, tmp: Path) -> tuple[float, float]:
    """SIGKILL a driving process inside a step, then measure two restarts: an in-process
    worker (serve() start → first resumed step) and a `perdure worker` process (spawn →
    first resumed step, interpreter start and imports included)."""
    results: list[float] = []
    for mode in ("in-process", "cli"):
        run_id = uuid.uuid4().hex
        gate, marker = tmp / f"{run_id}.gate", tmp / f"{run_id}.marker"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        driver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "perdure.testing.drive",
                "--url",
                url,
                "--module",
                "benchmarks.bench_workflows",
                "--workflow",
                "bench_recovery",
                "--run-id",
                run_id,
                "--input",
                f'{{"args": [{history}, "{gate}", "{marker}"], "kwargs": {{}}}}',
            ],
            env=env,
        )
        while not gate.exists():
            await asyncio.sleep(0.005)
        driver.kill()
        driver.wait()
        if mode == "in-process":
            backend = open_backend(url)
            await backend.open()  # connecting and migrating is not part of recovery
            stop = asyncio.Event()
            t0 = time.time()
            task = asyncio.create_task(backend.serve(stop=stop))
            while not marker.exists():
                await asyncio.sleep(0.001)
            results.append(float(marker.read_text()) - t0)
            stop.set()
            await task
            await backend.close()
        else:
            t0 = time.time()
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "perdure",
                    "worker",
                    "benchmarks.bench_workflows",
                    "--url",
                    url,
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while not marker.exists():
                await asyncio.sleep(0.001)
            results.append(float(marker.read_text()) - t0)
            worker.kill()
            worker.wait()
    return results[0], results[1]


async def repeat(fn: Callable[[], Coroutine[Any, Any, float]], times: int) -> list[float]:
    return [await fn() for _ in range(times)]


#: DESIGN.md: "PostgreSQL within 1.3x of a bare single-row insert+commit".
PG_TARGET = Target("ratio", 1.3, "<= 1.3x bare insert+commit")
RECOVERY_TARGET = Target("value", 100.0, "< 100 ms")
REPLAY_TARGET = Target("value", 50.0, "< 50 ms")


async def main(
    n: int, times: int, *, recovery_too: bool = True, histories: tuple[int, ...] = (10, 1000)
) -> list[Figure]:
    """Print the tables; return the figures."""
    figures: list[Figure] = []
    tmp = Path(tempfile.mkdtemp(prefix="perdure-bench-"))
    schema = f"perdure_bench_{uuid.uuid4().hex[:8]}"
    pg_url = f"{PG_BASE}{'&' if '?' in PG_BASE else '?'}schema={schema}"
    stores = [
        ("sqlite (synchronous=NORMAL, default)", f"sqlite:///{tmp}/normal.db", "normal"),
        ("sqlite (synchronous=FULL)", f"sqlite:///{tmp}/full.db?synchronous=full", "full"),
        ("postgresql", pg_url, None),
    ]
    plain = statistics.median(await repeat(lambda: plain_steps(n), times))
    print(
        f"\nper-step cost, {n} steps per run, median of {times} runs "
        f"(plain in-memory call: {plain * 1e6:.1f} µs/step)\n"
    )
    print(
        f"{'store':40} {'bare insert+commit':>20} {'perdure step':>14} {'ratio':>7} "
        f"{'writes/step':>12}"
    )
    try:
        for label, url, sync in stores:
            # Interleaved, so a change of machine load hits both columns alike.
            bare: list[float] = []
            ours: list[float] = []
            writes = 0.0
            for _ in range(times):
                if sync is None:
                    bare.append(await bare_postgres(PG_BASE, n))
                else:
                    bare.append(await bare_sqlite(str(tmp / f"bare-{sync}.db"), sync, n))
                per_step, writes = await perdure_steps(url, n)
                ours.append(per_step)
            b, bs = median_spread(bare)
            o, os_ = median_spread(ours)
            bare_col = f"{b * 1e6:.1f} ±{bs * 1e6:.1f}µs"
            ours_col = f"{o * 1e6:.1f} ±{os_ * 1e6:.1f}µs"
            print(f"{label:40} {bare_col:>20} {ours_col:>14} {o / b:>6.2f}x {writes:>11.3f}")
            store = label.split(" (")[0] if sync is None else f"sqlite {sync.upper()}"
            figures.append(
                Figure(
                    f"per_step.bare.{store.replace(' ', '_')}",
                    "per-step overhead",
                    f"perdure embedded, {store}",
                    "µs/step",
                    [x * 1e6 for x in ours],
                    anchor=f"bare insert+commit, {store}",
                    anchor_samples=[x * 1e6 for x in bare],
                    settings=(
                        f"{n} trivial steps/run; {label}; {writes:.3f} writes/step; "
                        f"plain call {plain * 1e6:.1f} µs/step"
                    ),
                    target=PG_TARGET if sync is None else None,
                )
            )
        if not recovery_too:
            return figures
        print(f"\nrecovery after SIGKILL: worker start → first resumed step (median of {times})\n")
        head = f"{'store':40} {'history':>8} {'in-process serve()':>20}"
        print(f"{head} {'`perdure worker` process':>26}")
        for label, url, sync in stores:
            store = "postgresql" if sync is None else f"sqlite {sync.upper()}"
            for history in histories:
                pairs = [await recovery(url, history, tmp) for _ in range(times)]
                inproc = statistics.median(p[0] for p in pairs)
                cli = statistics.median(p[1] for p in pairs)
                print(f"{label:40} {history:>8} {inproc * 1e3:>17.1f} ms {cli * 1e3:>23.1f} ms")
                key = store.replace(" ", "_")
                figures.append(
                    Figure(
                        f"recovery.serve.{key}.h{history}",
                        "recovery",
                        (
                            f"replay of a {history}-step history: serve() start -> first "
                            f"new step, {store}"
                            if history >= 1000
                            else f"in-process serve() start -> first resumed step, {store}, "
                            f"{history}-step history"
                        ),
                        "ms",
                        [p[0] * 1e3 for p in pairs],
                        settings="SIGKILLed driver; store opened before the clock starts",
                        target=REPLAY_TARGET if history >= 1000 else RECOVERY_TARGET,
                        params={"history": history, "store": store},
                    )
                )
                figures.append(
                    Figure(
                        f"recovery.cli.{key}.h{history}",
                        "recovery",
                        f"`perdure worker` spawn -> first resumed step, {store}, "
                        f"{history}-step history",
                        "ms",
                        [p[1] * 1e3 for p in pairs],
                        settings="process spawn, interpreter start and imports included",
                        params={"history": history, "store": store},
                    )
                )
        return figures
    finally:
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-recovery", action="store_true", help="per-step figures only")
    parser.add_argument(
        "--histories", default="10,1000", help="recovery history lengths (default 10,1000)"
    )
    add_json_argument(parser)
    ns = parser.parse_args()
    hist = tuple(int(h) for h in ns.histories.split(","))
    found = asyncio.run(main(ns.steps, ns.repeat, recovery_too=not ns.no_recovery, histories=hist))
    write_json(ns.json, found)
