"""Workflows the conformance scenarios drive, in worker processes and in the test process.

Every side effect goes to the test's receiver (``PERDURE_TEST_RECEIVER``), so counts
are taken outside the worker. ``PERDURE_SCENARIO_VARIANT=v2`` changes the code under
in-flight runs, for the determinism scenario.
"""

from __future__ import annotations

import os
from typing import Any

import perdure
from perdure.testing import post


def _receiver(path: str) -> str:
    return f"{os.environ['PERDURE_TEST_RECEIVER']}/{path}"


@perdure.step
def lookup(order_id: str) -> dict[str, Any]:
    post(_receiver("plain/lookup"), {"order": order_id})
    return {"order": order_id, "cents": 4200}


@perdure.effect(idempotent_receiver=True)
def charge(order_id: str, cents: int) -> str:
    answer = post(
        _receiver("dedup/charge"),
        {"order": order_id, "cents": cents},
        key=perdure.idempotency_key(),
    )
    return str(answer["id"])


@perdure.effect()  # the email relay cannot dedupe: intent before action
def email(order_id: str) -> str:
    answer = post(_receiver("plain/email"), {"order": order_id}, key=perdure.idempotency_key())
    return str(answer["id"])


@perdure.step
def done(order_id: str) -> str:
    post(_receiver("plain/done"), {"order": order_id})
    return "ok"


@perdure.workflow(name="refund")
async def refund(order_id: str) -> dict[str, Any]:
    """lookup → charge (idempotent receiver) → email (non-idempotent) → done."""
    order = await lookup(order_id)
    charge_id = await charge(order_id, order["cents"])
    email_id = await email(order_id)
    await done(order_id)
    return {"charge": charge_id, "email": email_id}


@perdure.step(retry=perdure.RetryPolicy(max_attempts=4, initial_interval=0.01, jitter=0))
def flaky(order_id: str) -> str:
    return str(post(_receiver("flaky/ledger"), {"order": order_id})["id"])


@perdure.workflow(name="flaky_refund")
async def flaky_refund(order_id: str) -> str:
    await lookup(order_id)
    return await flaky(order_id)


@perdure.workflow(name="approval")
async def approval(order_id: str) -> dict[str, Any]:
    """Charge, then wait for a human's approval before emailing."""
    order = await lookup(order_id)
    await charge(order_id, order["cents"])
    decision = await perdure.wait_for_signal(perdure.APPROVAL)
    if decision["approved"]:
        await email(order_id)
    return decision


def _refund_charge(charge_id: str) -> str:
    return str(post(_receiver("plain/refund"), {"charge": charge_id})["id"])


@perdure.effect(idempotent_receiver=True, compensate=_refund_charge)
def charge_with_refund(order_id: str, cents: int) -> str:
    return str(
        post(
            _receiver("dedup/charge"),
            {"order": order_id, "cents": cents},
            key=perdure.idempotency_key(),
        )["id"]
    )


@perdure.workflow(name="saga")
async def saga(order_id: str) -> str:
    await charge_with_refund(order_id, 100)
    await charge_with_refund(order_id + "-b", 200)
    await perdure.wait_for_signal("go")
    return "shipped"


@perdure.step
def tick(i: int) -> int:
    return i


@perdure.workflow(name="long")
async def long(n: int) -> int:
    total = 0
    for i in range(n):
        total += await tick(i)
    post(_receiver("plain/long-end"), {"total": total})  # a hold point after every step
    return total


@perdure.step
def big(size: int) -> str:
    return "x" * size


@perdure.workflow(name="large")
async def large(size: int) -> int:
    payload = await big(size)
    await perdure.wait_for_signal("go")
    return len(payload)


if os.environ.get("PERDURE_SCENARIO_VARIANT") == "v2":

    @perdure.step(name="lookup_v2")
    def lookup_renamed(order_id: str) -> dict[str, Any]:
        return {"order": order_id, "cents": 1}

    @perdure.workflow(name="approval")
    async def approval_v2(order_id: str) -> dict[str, Any]:
        await lookup_renamed(order_id)  # renamed step: history says "lookup"
        return {"approved": True}


@perdure.step
def not_storable() -> object:
    return object()


@perdure.workflow(name="bad_result")
async def bad_result() -> object:
    await lookup("x")
    return await not_storable()
