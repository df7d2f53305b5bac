"""Workflows the benchmarks drive (module-level, so a worker process can resume them)."""

from __future__ import annotations

import asyncio
import os
import time

import perdure


@perdure.step
async def tick(i: int) -> int:
    return i


@perdure.workflow(name="bench_steps")
async def steps(n: int) -> int:
    total = 0
    for i in range(n):
        total += await tick(i)
    return total


@perdure.step
async def gate(gate_path: str, marker_path: str) -> float:
    """First execution: announce itself and hang until SIGKILLed. After the crash the
    step has no record, so the resumed run executes it again: that is the first
    resumed step, and it stamps the time."""
    if os.path.exists(gate_path):
        now = time.time()
        with open(marker_path + ".tmp", "w", encoding="utf-8") as f:
            f.write(repr(now))
        os.replace(marker_path + ".tmp", marker_path)  # appears whole, never half-written
        return now
    with open(gate_path, "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


@perdure.workflow(name="bench_recovery")
async def recovery(history: int, gate_path: str, marker_path: str) -> float:
    for i in range(history):
        await tick(i)
    return await gate(gate_path, marker_path)


@perdure.step
async def model_call(i: int, latency: float) -> int:
    """An I/O-bound step: ``latency`` seconds of simulated model latency."""
    await asyncio.sleep(latency)
    return i


@perdure.workflow(name="bench_io")
async def io_run(steps: int, latency: float) -> int:
    """``steps`` I/O-bound steps, one after the other."""
    total = 0
    for i in range(steps):
        total += await model_call(i, latency)
    return total


#: perf_counter() at the end of each ``stamped_tick`` (read by benchmarks.scale).
STAMPS: list[float] = []


@perdure.step
async def stamped_tick(i: int) -> int:
    STAMPS.append(time.perf_counter())
    return i


@perdure.workflow(name="bench_stamped")
async def stamped(n: int) -> int:
    """``n`` trivial steps, each stamping the time it ran."""
    total = 0
    for i in range(n):
        total += await stamped_tick(i)
    return total


@perdure.step
async def io_step(i: int, seconds: float) -> int:
    """A step that waits on I/O for ``seconds`` (a model or HTTP call)."""
    await asyncio.sleep(seconds)
    return i


@perdure.workflow(name="bench_io_steps")
async def io_steps(n: int, seconds: float) -> int:
    total = 0
    for i in range(n):
        total += await io_step(i, seconds)
    return total


@perdure.workflow(name="bench_waits")
async def waits() -> object:
    """Suspends until someone signals it (the idle benchmark)."""
    return await perdure.wait_for_signal("go")
