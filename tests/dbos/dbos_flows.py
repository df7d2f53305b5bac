"""Workflows for the DBOS tests; effects go to the test's receiver."""

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
    return {"order": order_id, "cents": 4200, "at": (1, 2)}


@perdure.effect(idempotent_receiver=True)
def charge(order_id: str, cents: int) -> str:
    answer = post(
        _receiver("dedup/charge"),
        {"order": order_id, "cents": cents},
        key=perdure.idempotency_key(),
    )
    return str(answer["id"])


@perdure.effect()
def email(order_id: str) -> str:
    return str(post(_receiver("plain/email"), {"order": order_id})["id"])


@perdure.workflow(name="dbos_approval")
async def approval(order_id: str) -> dict[str, Any]:
    order = await lookup(order_id)
    await charge(order_id, order["cents"])
    decision = await perdure.wait_for_signal(perdure.APPROVAL, details={"order": order_id})
    if decision["approved"]:
        await email(order_id)
    return decision


@perdure.step(retry=perdure.RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=0))
def broken(order_id: str) -> str:
    raise ValueError(f"no order {order_id}")


@perdure.workflow(name="dbos_failing")
async def failing(order_id: str) -> str:
    await lookup(order_id)
    return await broken(order_id)


@perdure.workflow(name="dbos_gated")
async def gated(order_id: str) -> dict[str, Any]:
    """Waits for the signal ``go`` (holding no slot), then runs a step."""
    await perdure.wait_for_signal("go")
    return await lookup(order_id)


@perdure.step
def enter(order_id: str) -> str:
    return str(post(_receiver("plain/enter"), {"order": order_id})["id"])


@perdure.workflow(name="dbos_queued", queue="serial")
async def queued(order_id: str) -> str:
    """A run on the DBOS queue ``serial``: only its workers drive it."""
    return await enter(order_id)
