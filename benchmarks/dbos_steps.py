"""perdure-dbos against plain DBOS (same database) and perdure's embedded engine.

``python -m benchmarks.dbos_steps [--steps N] [--repeat R] [--no-postgres] [--json PATH]``
prints, side by side, on SQLite and on PostgreSQL (a throwaway schema, dropped after):

* per-step overhead: wall time of an N-step workflow of trivial steps, divided by N;
* SIGKILL-to-resume latency: a child process runs a workflow until its 10th step blocks,
  is SIGKILLed, and a fresh process recovers the run; the figure is the wall time from
  the kill to the first resumed step (process start and recovery included, the same
  for every column). Plain DBOS recovers its own executor's workflows at launch; perdure
  (both backends) recovers through its worker path (``recover_dead`` / ``serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from dbos import DBOS, DBOSConfig, SetWorkflowID

import perdure
from benchmarks._results import Figure, Target, add_json_argument, write_json

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 240
BLOCK_AT = 10
ROOT = Path(__file__).resolve().parent.parent
PG_BASE = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: DESIGN.md: "Embedded SQLite at least 10x less per step than DBOS on SQLite".
TEN_X = Target("ratio", 0.1, "<= 0.1x DBOS (10x less)")


def _at_step(i: int) -> int:
    if i == BLOCK_AT and os.environ.get("BENCH_BLOCK") == "1":
        print("BLOCKED", flush=True)
        sys.stdin.read()  # held until SIGKILL
    if i == BLOCK_AT and os.environ.get("BENCH_RESUME") == "1":
        print(f"RESUMED {time.time():.6f}", flush=True)
    return i


@perdure.step
def p_step(i: int) -> int:
    return _at_step(i)


@perdure.workflow(name="bench_dbos_loop")
async def p_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += await p_step(i)
    return total


@DBOS.step(name="plain_step")
async def plain_step(i: int) -> int:
    return _at_step(i)


@DBOS.workflow(name="plain_loop")
async def plain_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += await plain_step(i)
    return total


def _plain_launch(target: str) -> None:
    """Launch plain DBOS on ``target``: a SQLite file path or a dbos+postgresql URL."""
    from perdure_dbos._backend import DbosUrl

    parsed = DbosUrl.parse(target if target.startswith("dbos+") else f"dbos+sqlite:///{target}")
    config: DBOSConfig = {
        "name": "plain",
        "system_database_url": parsed.system_database_url,
        "log_level": "WARNING",
        "enable_otlp": False,
    }
    if parsed.schema:
        config["dbos_system_schema"] = parsed.schema
    DBOS(config=config)
    DBOS.launch()


# -- per-step overhead -------------------------------------------------------------------


async def _per_step_perdure(url: str, n: int) -> float:
    from perdure.registry import open_backend

    backend = open_backend(url)
    await backend.open()
    try:
        t0 = time.perf_counter()
        handle = await backend.start(p_loop, (n,), {}, run_id=f"steps-{uuid.uuid4().hex}")
        assert await handle.result() == sum(range(n))
        return (time.perf_counter() - t0) / n
    finally:
        await backend.close()


async def _per_step_plain(n: int) -> float:
    t0 = time.perf_counter()
    with SetWorkflowID(f"plain-{uuid.uuid4().hex}"):
        handle = await DBOS.start_workflow_async(plain_loop, n)
    assert await handle.get_result() == sum(range(n))
    return (time.perf_counter() - t0) / n


async def _per_step_rounds(
    dbos_url: str, embedded_url: str, n: int, times: int, full_url: str | None = None
) -> tuple[list[float], list[float], list[float], list[float]]:
    """perdure-dbos and plain DBOS on one launched DBOS, one database, and perdure's
    embedded engine on the same kind of database, interleaved round by round (one
    warm-up round first); per-step seconds of (perdure-dbos, plain DBOS, embedded,
    embedded at ``full_url`` if given, else empty)."""
    from perdure.registry import open_backend

    ours: list[float] = []
    plain: list[float] = []
    embedded: list[float] = []
    full: list[float] = []
    backend = open_backend(dbos_url)
    await backend.open()
    try:
        for r in range(times + 1):
            p = await _per_step_plain(n)
            t0 = time.perf_counter()
            handle = await backend.start(p_loop, (n,), {}, run_id=f"steps-{uuid.uuid4().hex}")
            assert await handle.result() == sum(range(n))
            o = (time.perf_counter() - t0) / n
            e = await _per_step_perdure(embedded_url, n)
            f = await _per_step_perdure(full_url, n) if full_url else 0.0
            if r:
                if full_url:
                    full.append(f)
                plain.append(p)
                ours.append(o)
                embedded.append(e)
    finally:
        await backend.close()
    return ours, plain, embedded, full


# -- SIGKILL to resume -------------------------------------------------------------------


async def _child(mode: str, target: str, n: int) -> None:
    from perdure.registry import open_backend

    if mode == "plain":
        _plain_launch(target)
        if os.environ.get("BENCH_BLOCK") == "1":
            with SetWorkflowID(os.environ["BENCH_RUN_ID"]):
                handle = await DBOS.start_workflow_async(plain_loop, n)
        else:
            # recovered at launch
            handle = await DBOS.retrieve_workflow_async(os.environ["BENCH_RUN_ID"])
        await handle.get_result()
        DBOS.destroy()
        return
    backend = open_backend(target)
    await backend.open()
    try:
        run_id = os.environ["BENCH_RUN_ID"]
        if os.environ.get("BENCH_BLOCK") == "1":
            await backend.start(p_loop, (n,), {}, run_id=run_id)
            await backend.wait(run_id)
        else:
            stop = asyncio.Event()
            server = asyncio.create_task(backend.serve(stop=stop))
            await backend.wait(run_id, drive=False)
            stop.set()
            await server
    finally:
        await backend.close()


def _spawn(mode: str, target: str, n: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.dbos_steps", "--child", mode, target, str(n)],
        cwd=ROOT,
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _kill_to_resume(mode: str, target: str, n: int) -> float:
    run = {"BENCH_RUN_ID": f"kill-{uuid.uuid4().hex}"}
    first = _spawn(mode, target, n, {"BENCH_BLOCK": "1", **run})
    assert first.stdout is not None
    line = first.stdout.readline()
    assert line.strip() == "BLOCKED", line
    first.kill()
    killed = time.time()
    first.wait()
    second = _spawn(mode, target, n, {"BENCH_RESUME": "1", **run})
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, out
    resumed = next(float(x.split()[1]) for x in out.splitlines() if x.startswith("RESUMED"))
    return resumed - killed


@contextlib.contextmanager
def _pg_schemas(count: int) -> Iterator[list[str]]:
    """``count`` fresh PostgreSQL URLs (one schema each), dropped afterwards."""
    import psycopg

    schemas = [f"perdure_bench_{uuid.uuid4().hex[:10]}" for _ in range(count)]
    sep = "&" if "?" in PG_BASE else "?"
    try:
        yield [f"{PG_BASE}{sep}schema={s}" for s in schemas]
    finally:
        with psycopg.connect(PG_BASE, autocommit=True, connect_timeout=5) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def _ms(xs: list[float]) -> list[float]:
    return [x * 1e3 for x in xs]


def measure(
    db: str, urls: dict[str, str], n: int, times: int, kill_times: int
) -> tuple[list[Figure], list[tuple[str, float, float, float]]]:
    """Every figure on one kind of database ``db`` (sqlite or postgresql); ``urls`` has
    the keys pair (dbos+ URL), embedded, k-ours, k-plain (plain DBOS target), k-emb."""
    ours, plain, emb, full = asyncio.run(
        _per_step_rounds(urls["pair"], urls["embedded"], n, times, urls.get("embedded-full"))
    )
    kills: dict[str, list[float]] = {"ours": [], "plain": [], "emb": []}
    for _ in range(kill_times):  # interleaved, like the per-step rounds
        kills["ours"].append(_kill_to_resume("perdure", urls["k-ours"], 30))
        kills["plain"].append(_kill_to_resume("plain", urls["k-plain"], 30))
        kills["emb"].append(_kill_to_resume("perdure", urls["k-emb"], 30))
    settings = f"{n} trivial steps/run, {times} interleaved rounds after 1 warm-up"
    if db == "sqlite":
        settings += (
            "; DBOS: WAL, synchronous=FULL (SQLite's default, DBOS sets none); perdure "
            "embedded at its default synchronous=NORMAL"
        )
    kill_set = (
        f"kill at step {BLOCK_AT} of 30; SIGKILL -> first resumed step in a fresh "
        "process (interpreter start, imports, launch and recovery included)"
    )
    figures = [
        Figure(
            f"per_step.dbos.{db}.embedded",
            "per-step overhead",
            f"perdure embedded, {db}" + (" (default synchronous=NORMAL)" if full else ""),
            "µs/step",
            [x * 1e6 for x in emb],
            anchor=f"plain DBOS, {db}",
            anchor_samples=[x * 1e6 for x in plain],
            settings=settings,
            target=TEN_X if db == "sqlite" else None,
        ),
        *(
            [
                Figure(
                    f"per_step.dbos.{db}.embedded_full",
                    "per-step overhead",
                    f"perdure embedded, {db} synchronous=FULL",
                    "µs/step",
                    [x * 1e6 for x in full],
                    anchor=f"plain DBOS, {db}",
                    anchor_samples=[x * 1e6 for x in plain],
                    settings=settings.replace("at its default synchronous=NORMAL", "at FULL")
                    + " (equal durability)",
                    target=TEN_X,
                )
            ]
            if full
            else []
        ),
        Figure(
            f"per_step.dbos.{db}.perdure_dbos",
            "per-step overhead",
            f"perdure-dbos backend, {db}",
            "µs/step",
            [x * 1e6 for x in ours],
            anchor=f"plain DBOS, {db} (same launched DBOS)",
            anchor_samples=[x * 1e6 for x in plain],
            settings=settings,
        ),
        Figure(
            f"recovery.kill.{db}.embedded",
            "recovery",
            f"SIGKILL -> resumed step, perdure embedded, {db}",
            "ms",
            _ms(kills["emb"]),
            anchor=f"plain DBOS, {db}",
            anchor_samples=_ms(kills["plain"]),
            settings=kill_set,
        ),
        Figure(
            f"recovery.kill.{db}.perdure_dbos",
            "recovery",
            f"SIGKILL -> resumed step, perdure-dbos, {db}",
            "ms",
            _ms(kills["ours"]),
            anchor=f"plain DBOS, {db}",
            anchor_samples=_ms(kills["plain"]),
            settings=kill_set,
        ),
    ]
    med = statistics.median
    rows = [
        (f"{db}: per-step overhead (ms)", med(ours) * 1e3, med(plain) * 1e3, med(emb) * 1e3),
        (
            f"{db}: SIGKILL-to-resume (ms)",
            med(kills["ours"]) * 1e3,
            med(kills["plain"]) * 1e3,
            med(kills["emb"]) * 1e3,
        ),
    ]
    return figures, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5, help="per-step rounds (default 5)")
    parser.add_argument("--kill-repeat", type=int, default=3, help="SIGKILL rounds (default 3)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "TARGET", "N"))
    add_json_argument(parser)
    ns = parser.parse_args()
    if ns.child:
        mode, target, n = ns.child
        asyncio.run(_child(mode, target, int(n)))
        return
    n = ns.steps
    figures: list[Figure] = []
    rows: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_urls = {
            "pair": f"dbos+sqlite:///{tmp}/pair.db",
            "embedded": f"sqlite:///{tmp}/embedded.db",
            "embedded-full": f"sqlite:///{tmp}/embedded-full.db?synchronous=full",
            "k-ours": f"dbos+sqlite:///{tmp}/k-ours.db",
            "k-plain": f"{tmp}/k-plain.db",
            "k-emb": f"sqlite:///{tmp}/k-embedded.db",
        }
        f, r = measure("sqlite", sqlite_urls, n, ns.repeat, ns.kill_repeat)
        figures += f
        rows += r
    if not ns.no_postgres:
        with _pg_schemas(5) as pg:
            pg_urls = {
                "pair": f"dbos+{pg[0]}",
                "embedded": pg[1],
                "k-ours": f"dbos+{pg[2]}",
                "k-plain": f"dbos+{pg[3]}",
                "k-emb": pg[4],
            }
            f, r = measure("postgresql", pg_urls, n, ns.repeat, ns.kill_repeat)
            figures += f
            rows += r
    print(f"{n} trivial steps, median of {ns.repeat}; kill at step {BLOCK_AT} of 30")
    print(f"{'':34}{'perdure-dbos':>14}{'plain DBOS':>14}{'embedded':>14}")
    for name, a, b, c in rows:
        print(f"{name:34}{a:14.2f}{b:14.2f}{c:14.2f}")
    for fig in figures:
        ratio = fig.to_json()["ratio"]
        if fig.section == "per-step overhead" and ratio:
            print(f"{fig.subject} / {fig.anchor}: {ratio:.3f}x")
    write_json(ns.json, figures)


if __name__ == "__main__":
    main()
