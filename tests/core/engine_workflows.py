"""Module-level workflows, steps and values for ``test_engine.py``.

Workflows must be importable by name so a fresh backend can resume them. Executions
are counted in ``CALLS`` and observations kept in ``SEEN``; ``reset()`` clears both
(and the gates) before every test. ``gate(name)`` is an ``asyncio.Event`` a step can
wait on, so a test decides exactly when a step finishes without sleeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter, defaultdict
from typing import Any

import pydantic

import perdure
from perdure import (
    OutcomeUnknownError,
    PerdureError,
    PermanentError,
    RetryPolicy,
    SignalTimeoutError,
    StepFailedError,
)

CALLS: Counter[str] = Counter()
SEEN: defaultdict[str, list[Any]] = defaultdict(list)
GATES: dict[str, asyncio.Event] = {}

#: Retries with no wait, so a retry test costs no wall time.
FAST = RetryPolicy(max_attempts=3, initial_interval=0, jitter=0)


def reset() -> None:
    CALLS.clear()
    SEEN.clear()
    GATES.clear()


def gate(name: str) -> asyncio.Event:
    return GATES.setdefault(name, asyncio.Event())


# -- values that must survive a replay ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Route:
    name: str
    stops: list[Point]
    origin: Point | None = None


class Card(pydantic.BaseModel):
    holder: str
    amount: float
    tags: list[str] = []


# -- plain steps -------------------------------------------------------------------------


@perdure.step
async def add(a: int, b: int) -> int:
    CALLS["add"] += 1
    return a + b


@perdure.step
def mul(a: int, b: int) -> int:  # a sync step: runs in a thread
    CALLS["mul"] += 1
    return a * b


def square(v: int) -> int:
    CALLS["square"] += 1
    return v * v


async def halve(v: int) -> float:
    CALLS["halve"] += 1
    return v / 2


@perdure.workflow
async def arithmetic(x: int, y: int) -> dict[str, Any]:
    s = await add(x, y)
    p = await mul(s, 2)
    q = await perdure.run_step("square", square, p)
    h = await perdure.run_step("halve", halve, q)
    return {"sum": s, "double": p, "square": q, "half": h}


# -- record once, replay forever ---------------------------------------------------------


@perdure.step
async def fetch(n: int) -> dict[str, Any]:
    CALLS["fetch"] += 1
    return {"n": n, "items": [n, n + 1]}


@perdure.step
def think(data: dict[str, Any]) -> int:
    CALLS["think"] += 1
    return sum(data["items"])


@perdure.step
async def finish(tag: str) -> str:
    CALLS["finish"] += 1
    return f"finished:{tag}"


@perdure.workflow
async def approval_flow(n: int) -> dict[str, Any]:
    fetched = await fetch(n)
    thought = await think(fetched)
    decision = await perdure.wait_for_signal("approval")
    done = await finish("approved" if decision["ok"] else "rejected")
    return {"fetched": fetched, "thought": thought, "decision": decision, "done": done}


# -- idempotency keys --------------------------------------------------------------------


@perdure.effect(idempotent_receiver=True, retry=FAST)
def charge_card(amount: int) -> int:  # sync effect: the key must reach the thread
    SEEN["charge_card"].append(perdure.idempotency_key())
    CALLS["charge_card"] += 1
    if CALLS["charge_card"] == 1:
        raise ConnectionError("gateway hiccup")
    return amount


@perdure.effect(idempotent_receiver=True)
async def notify(text: str) -> str:
    SEEN["notify"].append(perdure.idempotency_key())
    CALLS["notify"] += 1
    return text


@perdure.workflow
async def key_flow(amount: int) -> dict[str, Any]:
    try:
        perdure.idempotency_key()
        body_error = None
    except PerdureError as exc:
        body_error = str(exc)
    charged = await charge_card(amount)
    sent = await notify(f"charged {charged}")
    return {"charged": charged, "sent": sent, "body_error": body_error}


# -- retries and failures ----------------------------------------------------------------


@perdure.step
async def prepare() -> str:
    CALLS["prepare"] += 1
    return "ready"


@perdure.step(retry=FAST)
async def flaky() -> str:
    CALLS["flaky"] += 1
    if CALLS["flaky"] < 3:
        raise ConnectionError(f"transient #{CALLS['flaky']}")
    return "ok"


@perdure.step(retry=FAST)
async def always_fails() -> str:
    CALLS["always_fails"] += 1
    raise ValueError("boom")


@perdure.step(retry=FAST)
async def declines() -> str:
    CALLS["declines"] += 1
    raise PermanentError("card declined")


@perdure.workflow
async def flaky_flow() -> list[str]:
    return [await prepare(), await flaky()]


@perdure.workflow
async def exhausted_flow() -> str:
    await prepare()
    return await always_fails()


@perdure.workflow
async def permanent_flow() -> str:
    await prepare()
    return await declines()


@perdure.workflow
async def recovering_flow() -> dict[str, Any]:
    await prepare()
    try:
        await declines()
        caught = None
    except StepFailedError as exc:
        caught = {"step": exc.step_key, "attempts": exc.attempts, "type": exc.error_type}
    SEEN["recovering_caught"].append(caught)
    decision = await perdure.wait_for_signal("go")
    done = await finish("recovered")
    return {"caught": caught, "decision": decision, "done": done}


# -- serialization through the engine ----------------------------------------------------


@perdure.step
async def unstorable() -> object:
    CALLS["unstorable"] += 1
    return object()


@perdure.workflow
async def unstorable_flow() -> dict[str, Any]:
    try:
        await unstorable()
    except StepFailedError as exc:
        return {
            "step": exc.step_key,
            "type": exc.error_type,
            "message": str(exc),
            "attempts": exc.attempts,
        }
    return {"step": None}


@perdure.workflow
async def unstorable_result_flow() -> object:
    return object()


@perdure.step
async def make_point() -> Point:
    CALLS["make_point"] += 1
    return Point(1, 2)


@perdure.step
async def make_route() -> Route:
    CALLS["make_route"] += 1
    return Route("loop", [Point(0, 0), Point(3, 4)], origin=Point(9, 9))


@perdure.step
def make_card() -> Card:
    CALLS["make_card"] += 1
    return Card(holder="Ada", amount=12.5, tags=["vip"])


@perdure.workflow
async def typed_flow() -> dict[str, Any]:
    point = await make_point()
    route = await make_route()
    card = await make_card()
    await perdure.wait_for_signal("go")
    SEEN["typed"].append((point, route, card))
    return {"point": point, "route": route, "card": card}


# -- intent before action ----------------------------------------------------------------


@perdure.effect()
async def charge(amount: int) -> dict[str, Any]:
    CALLS["charge"] += 1
    SEEN["charge"].append(perdure.idempotency_key())
    return {"charged": amount}


@perdure.workflow
async def pay_flow(amount: int) -> dict[str, Any]:
    try:
        receipt = await charge(amount)
    except StepFailedError as exc:
        return {"failed": exc.step_key, "type": exc.error_type, "message": exc.error_message}
    return {"paid": receipt}


@perdure.effect(idempotent_receiver=True)
async def charge_dedup(amount: int) -> dict[str, Any]:
    CALLS["charge_dedup"] += 1
    SEEN["charge_dedup"].append(perdure.idempotency_key())
    return {"charged": amount}


@perdure.workflow
async def pay_dedup_flow(amount: int) -> dict[str, Any]:
    return await charge_dedup(amount)


@perdure.effect()
async def charge_unknown(amount: int) -> dict[str, Any]:
    CALLS["charge_unknown"] += 1
    if CALLS["charge_unknown"] == 1:
        raise OutcomeUnknownError("gateway timed out after sending the request")
    return {"charged": amount}


@perdure.workflow
async def pay_unknown_flow(amount: int) -> dict[str, Any]:
    return await charge_unknown(amount)


@perdure.effect(idempotent_receiver=True, retry=FAST)
async def charge_unknown_dedup(amount: int) -> dict[str, Any]:
    CALLS["charge_unknown_dedup"] += 1
    SEEN["charge_unknown_dedup"].append(perdure.idempotency_key())
    if CALLS["charge_unknown_dedup"] == 1:
        raise OutcomeUnknownError("gateway timed out after sending the request")
    return {"charged": amount}


@perdure.workflow
async def pay_unknown_dedup_flow(amount: int) -> dict[str, Any]:
    return await charge_unknown_dedup(amount)


# -- signals and timers ------------------------------------------------------------------


@perdure.step
async def hold(name: str) -> str:
    """Finishes only when the test opens ``gate(name)``."""
    gate(f"{name}:started").set()
    await gate(name).wait()
    CALLS[f"hold:{name}"] += 1
    return name


@perdure.workflow
async def early_signal_flow() -> list[Any]:
    await hold("early")
    # A plain signal (not an approval request) may arrive before its wait.
    first = await perdure.wait_for_signal("go")
    second = await perdure.wait_for_signal("go")
    return [first, second]


@perdure.workflow
async def timeout_flow(timeout: float) -> Any:
    try:
        return await perdure.wait_for_signal("never", timeout=timeout)
    except SignalTimeoutError as exc:
        return {"timed_out": exc.signal_name}


@perdure.workflow
async def nap_flow(seconds: float) -> str:
    await perdure.sleep(seconds)
    return await finish("nap")


# -- determinism: one name, several versions (the registry keeps the last) --------------


@perdure.step
async def alpha() -> str:
    CALLS["alpha"] += 1
    return "a"


@perdure.step
async def beta() -> str:
    CALLS["beta"] += 1
    return "b"


@perdure.workflow(name="changing")
async def changing_v1() -> list[Any]:
    a = await alpha()
    s = await perdure.wait_for_signal("go")
    return ["v1", a, s]


@perdure.workflow(name="changing")
async def changing_v2() -> list[Any]:
    b = await beta()  # position 1 now has another name
    s = await perdure.wait_for_signal("go")
    return ["v2", b, s]


@perdure.workflow(name="changing")
async def changing_v3() -> list[Any]:
    return ["v3"]  # finishes before reaching the recorded step 1:alpha


@perdure.workflow(name="changing")
async def changing_v4() -> list[Any]:
    try:  # agent code often guards a tool call like this
        b = await beta()
    except Exception:
        b = "fallback"
    s = await perdure.wait_for_signal("go")
    return ["v4", b, s]


# -- patch markers -----------------------------------------------------------------------


@perdure.step
async def old_mid() -> str:
    CALLS["old_mid"] += 1
    return "old"


@perdure.step
async def new_mid() -> str:
    CALLS["new_mid"] += 1
    return "new"


@perdure.workflow(name="patchy")
async def patchy_old() -> list[Any]:
    a = await alpha()
    m = await old_mid()
    s = await perdure.wait_for_signal("go")
    return [a, m, s]


@perdure.workflow(name="patchy")
async def patchy_new() -> list[Any]:
    a = await alpha()
    if perdure.patched("fix"):
        m = await new_mid()
    else:
        m = await old_mid()
    s = await perdure.wait_for_signal("go")
    return [a, m, s]


# -- parallel steps ----------------------------------------------------------------------


@perdure.step
def scaled(n: int, factor: int) -> int:  # sync: each call yields to the loop (thread)
    CALLS[f"scaled:{n}:{factor}"] += 1
    return n * factor


async def branch(n: int) -> list[int]:
    first = await scaled(n, 10)
    second = await scaled(n, 100)
    return [first, second]


@perdure.workflow
async def fanout_flow() -> dict[str, Any]:
    head = await alpha()
    results = await asyncio.gather(*(branch(n) for n in range(1, 4)))
    s = await perdure.wait_for_signal("go")
    return {"head": head, "results": results, "signal": s}


@perdure.workflow
async def fanout_first_flow() -> dict[str, Any]:
    results = await asyncio.gather(*(branch(n) for n in range(1, 4)))  # no step before it
    s = await perdure.wait_for_signal("go")
    return {"results": results, "signal": s}


# -- cancellation and compensation -------------------------------------------------------


def refund(result: dict[str, Any]) -> None:  # a sync compensation
    CALLS["refund"] += 1
    SEEN["compensations"].append(("refund", result))


async def release(result: dict[str, Any]) -> None:  # an async compensation
    CALLS["release"] += 1
    SEEN["compensations"].append(("release", result))


@perdure.effect(compensate=refund)
async def debit(amount: int) -> dict[str, Any]:
    CALLS["debit"] += 1
    return {"debited": amount}


@perdure.effect(idempotent_receiver=True, compensate=release)
async def reserve(item: str) -> dict[str, Any]:
    CALLS["reserve"] += 1
    return {"reserved": item}


@perdure.workflow
async def booking_flow() -> str:
    await debit(10)
    await reserve("seat 4A")
    await perdure.wait_for_signal("confirm")
    return "booked"


@perdure.effect(idempotent_receiver=True, compensate=refund)
async def slow_debit(amount: int) -> dict[str, Any]:
    gate("slow_debit:started").set()
    await gate("slow_debit").wait()
    CALLS["slow_debit"] += 1
    return {"debited": amount}


@perdure.workflow
async def cancel_midway_flow() -> str:
    await slow_debit(5)
    await perdure.wait_for_signal("confirm")
    return "booked"


# -- idempotent start --------------------------------------------------------------------


@perdure.workflow
async def gated_flow(tag: str) -> str:
    await hold("gated")
    return tag


# -- fencing -----------------------------------------------------------------------------


@perdure.step
async def after_fence() -> str:
    CALLS["after_fence"] += 1
    return "after"


@perdure.workflow
async def fenced_flow() -> list[str]:
    first = await hold("fenced")
    second = await after_fence()
    return [first, second]


@perdure.workflow
async def fenced_swallow_flow() -> list[str]:
    try:
        first = await hold("fenced")
    except Exception:  # user code that guards a step broadly
        first = "fallback"
    second = await after_fence()
    return [first, second]


@perdure.workflow
async def go_flow() -> Any:
    return await perdure.wait_for_signal("go")
