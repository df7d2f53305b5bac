"""perdure-dbos against plain DBOS (same SQLite database) and perdure's embedded engine.

``python -m benchmarks.dbos_steps [--steps N]`` prints, side by side:

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dbos import DBOS, DBOSConfig, SetWorkflowID

import perdure

BLOCK_AT = 10
ROOT = Path(__file__).resolve().parent.parent


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


def _plain_launch(db: str) -> None:
    config: DBOSConfig = {
        "name": "plain",
        "system_database_url": f"sqlite:///{db}",
        "log_level": "WARNING",
        "enable_otlp": False,
    }
    DBOS(config=config)
    DBOS.launch()


# -- per-step overhead -------------------------------------------------------------------


async def _per_step_perdure(url: str, n: int) -> float:
    from perdure.registry import open_backend

    backend = open_backend(url)
    await backend.open()
    try:
        t0 = time.perf_counter()
        handle = await backend.start(p_loop, (n,), {}, run_id=f"steps-{n}")
        assert await handle.result() == sum(range(n))
        return (time.perf_counter() - t0) / n
    finally:
        await backend.close()


async def _per_step_plain(n: int) -> float:
    t0 = time.perf_counter()
    with SetWorkflowID(f"plain-{n}"):
        handle = await DBOS.start_workflow_async(plain_loop, n)
    assert await handle.get_result() == sum(range(n))
    return (time.perf_counter() - t0) / n


async def _per_step_dbos_pair(db: str, n: int) -> tuple[float, float]:
    """perdure-dbos and plain DBOS on one launched DBOS, one database."""
    from perdure.registry import open_backend

    backend = open_backend(f"dbos+sqlite:///{db}")
    await backend.open()
    try:
        plain = await _per_step_plain(n)
        t0 = time.perf_counter()
        handle = await backend.start(p_loop, (n,), {}, run_id=f"steps-{n}")
        assert await handle.result() == sum(range(n))
        ours = (time.perf_counter() - t0) / n
    finally:
        await backend.close()
    return ours, plain


# -- SIGKILL to resume -------------------------------------------------------------------


async def _child(mode: str, target: str, n: int) -> None:
    from perdure.registry import open_backend

    if mode == "plain":
        _plain_launch(target)
        if os.environ.get("BENCH_BLOCK") == "1":
            with SetWorkflowID("kill-plain"):
                handle = await DBOS.start_workflow_async(plain_loop, n)
        else:
            handle = await DBOS.retrieve_workflow_async("kill-plain")  # recovered at launch
        await handle.get_result()
        DBOS.destroy()
        return
    backend = open_backend(target)
    await backend.open()
    try:
        if os.environ.get("BENCH_BLOCK") == "1":
            await backend.start(p_loop, (n,), {}, run_id="kill-run")
            await backend.wait("kill-run")
        else:
            stop = asyncio.Event()
            server = asyncio.create_task(backend.serve(stop=stop))
            await backend.wait("kill-run", drive=False)
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
    first = _spawn(mode, target, n, {"BENCH_BLOCK": "1"})
    assert first.stdout is not None
    line = first.stdout.readline()
    assert line.strip() == "BLOCKED", line
    first.kill()
    killed = time.time()
    first.wait()
    second = _spawn(mode, target, n, {"BENCH_RESUME": "1"})
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, out
    resumed = next(float(x.split()[1]) for x in out.splitlines() if x.startswith("RESUMED"))
    return resumed - killed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "TARGET", "N"))
    ns = parser.parse_args()
    if ns.child:
        mode, target, n = ns.child
        asyncio.run(_child(mode, target, int(n)))
        return
    n = ns.steps
    with tempfile.TemporaryDirectory() as tmp:
        ours, plain = asyncio.run(_per_step_dbos_pair(f"{tmp}/pair.db", n))
        embedded = asyncio.run(_per_step_perdure(f"sqlite:///{tmp}/embedded.db", n))
        k_ours = _kill_to_resume("perdure", f"dbos+sqlite:///{tmp}/k-ours.db", 30)
        k_plain = _kill_to_resume("plain", f"{tmp}/k-plain.db", 30)
        k_emb = _kill_to_resume("perdure", f"sqlite:///{tmp}/k-embedded.db", 30)
    rows = [
        ("per-step overhead (ms)", ours * 1e3, plain * 1e3, embedded * 1e3),
        ("SIGKILL-to-resume (ms)", k_ours * 1e3, k_plain * 1e3, k_emb * 1e3),
    ]
    print(f"SQLite, {n} trivial steps; kill at step {BLOCK_AT} of 30")
    print(f"{'':26}{'perdure-dbos':>14}{'plain DBOS':>14}{'embedded':>14}")
    for name, a, b, c in rows:
        print(f"{name:26}{a:14.2f}{b:14.2f}{c:14.2f}")
    print(f"perdure-dbos / plain DBOS per step: {ours / plain:.2f}x")
    with contextlib.suppress(ZeroDivisionError):
        print(f"plain DBOS / embedded per step:     {plain / embedded:.1f}x")


if __name__ == "__main__":
    main()
