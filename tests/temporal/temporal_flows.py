"""Workflows for the Temporal-only tests."""

from __future__ import annotations

import asyncio
from typing import Any

import perdure


@perdure.step
def big(kib: int) -> str:
    return "x" * (kib * 1024)


@perdure.workflow(name="temporal_big_results")
async def big_results(turns: int, kib: int) -> int:
    total = 0
    for _ in range(turns):
        total += len(await big(kib))
    return total


@perdure.step
def note(text: str) -> str:
    return text


@perdure.workflow(name="temporal_waits")
async def waits() -> Any:
    await note("before")
    return await perdure.wait_for_signal(perdure.APPROVAL)


@perdure.workflow(name="temporal_long")
async def long(steps: int) -> Any:
    for i in range(steps):
        await note(f"a{i}")
    decision = await perdure.wait_for_signal(perdure.APPROVAL)
    for i in range(steps):
        await note(f"b{i}")
    return decision


@perdure.effect()  # the receiver cannot dedupe: intent before action
def mail(receiver: str) -> str:
    from perdure.testing.receivers import post

    return str(post(f"{receiver}/plain/mail", {"to": "ann"}, key=perdure.idempotency_key())["id"])


@perdure.workflow(name="temporal_mail_then_wait")
async def mail_then_wait(receiver: str) -> Any:
    await mail(receiver)
    return await perdure.wait_for_signal(perdure.APPROVAL)


@perdure.step
def secret_lookup(order: str) -> str:
    return f"{order}:SECRET-RESULT-5712"


@perdure.workflow(name="temporal_sealed")
async def sealed(order: str) -> Any:
    found = await secret_lookup(order)
    decision = await perdure.wait_for_signal("go")
    return {"found": found, "decision": decision}


@perdure.workflow(name="temporal_story")
async def story() -> Any:
    await note("looked up")
    await perdure.sleep(0.5)
    decision = await perdure.wait_for_signal("go")
    await note("done")
    return decision


def _release(receiver: str) -> str:
    from perdure.testing.receivers import post

    return str(post(f"{receiver}/plain/release", {})["id"])


@perdure.step(compensate=_release)
def reserve(receiver: str) -> str:
    """A completed step with a compensation: a cancel must release it, once."""
    return receiver


@perdure.step
async def long_lookup(receiver: str) -> str:
    """An idempotent step that runs until it is cancelled, and tells the receiver both
    that it began and that its body saw the cancellation."""
    from perdure.testing.receivers import post

    post(f"{receiver}/plain/lookup-began", {})
    try:
        await asyncio.Event().wait()  # nothing sets it: only a cancellation ends it
    except asyncio.CancelledError:
        post(f"{receiver}/plain/lookup-cancelled", {})
        raise
    return "never"


@perdure.workflow(name="temporal_reserve_then_look_up")
async def reserve_then_look_up(receiver: str) -> str:
    await reserve(receiver)
    return await long_lookup(receiver)


@perdure.workflow(name="temporal_reserve_then_mail")
async def reserve_then_mail(receiver: str) -> str:
    await reserve(receiver)
    return await mail(receiver)
