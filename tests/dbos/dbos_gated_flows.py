"""Workflows whose re-drives the test holds at a gate, between replayed steps and a wait."""

from __future__ import annotations

import asyncio
from typing import Any

import perdure


class Gate:
    """Open: drives pass. Closed: a drive stops at it (``reached`` is set) until opened."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.opened.set()
        self.reached = asyncio.Event()

    def close(self) -> None:
        self.opened.clear()
        self.reached.clear()

    async def passing(self) -> None:
        if not self.opened.is_set():
            self.reached.set()
            await self.opened.wait()


GATE = Gate()


@perdure.step
def prepare(order_id: str) -> str:
    return f"prepared-{order_id}"


@perdure.workflow(name="dbos_gated_approval")
async def gated_approval(order_id: str) -> Any:
    await prepare(order_id)
    await GATE.passing()  # replayed code: a re-drive stops here while the gate is shut
    return await perdure.wait_for_signal(perdure.APPROVAL, details={"order": order_id})


@perdure.workflow(name="dbos_gated_signal")
async def gated_signal(order_id: str) -> Any:
    await prepare(order_id)
    await GATE.passing()
    return await perdure.wait_for_signal("go")


@perdure.workflow(name="dbos_gated_steps")
async def gated_steps(order_id: str) -> Any:
    first = await prepare(order_id)
    answer = await perdure.wait_for_signal("go")
    return {"first": first, "answer": answer}
