"""Workflows of the substrate-fault tests (module level, so the engine can find them)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import perdure

#: How often each step's body ran in this process.
CALLS: Counter[str] = Counter()
#: What the workflows' own ``except Exception`` saw (it must see no substrate error).
SWALLOWED: list[str] = []
#: Set by ``slow`` once it is running; ``slow`` finishes when ``RELEASE`` is set.
STARTED = asyncio.Event()
RELEASE = asyncio.Event()


def reset() -> None:
    """Fresh counters, and fresh events for the next test's event loop."""
    global STARTED, RELEASE
    CALLS.clear()
    SWALLOWED.clear()
    STARTED, RELEASE = asyncio.Event(), asyncio.Event()


@perdure.step
def first(x: int) -> int:
    CALLS["first"] += 1
    return x + 1


@perdure.effect()  # non-idempotent: an intent is recorded before it runs
def send(x: int) -> str:
    CALLS["send"] += 1
    return f"sent-{x}"


@perdure.workflow(name="faults.guarded")
async def guarded(x: int) -> dict[str, Any]:
    """Catches every Exception around its steps, as careless user code does."""
    try:
        a = await first(x)
        b = await send(a)
    except Exception as exc:
        SWALLOWED.append(f"{type(exc).__name__}: {exc}")
        return {"swallowed": True}
    return {"a": a, "b": b}


@perdure.step
async def slow(x: int) -> int:
    CALLS["slow"] += 1
    STARTED.set()
    await RELEASE.wait()
    return x


@perdure.workflow(name="faults.two_slow")
async def two_slow(x: int) -> int:
    a = await slow(x)
    return await first(a)
