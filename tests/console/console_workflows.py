"""Workflows the console tests start: one waits for an approval, one for two in a row,
one parks on an effect whose outcome is unknown, one fails."""

from __future__ import annotations

import perdure


@perdure.step
async def quote(order: str, cents: int) -> dict[str, object]:
    return {"order": order, "cents": cents}


@perdure.effect(idempotent_receiver=True)
async def pay_out(order: str, cents: int) -> str:
    return f"refunded {cents} on {order} with key {perdure.idempotency_key()}"


@perdure.workflow
async def refund(order: str, cents: int) -> str:
    """Quote, ask a human, then pay: the shape of an agent's approved tool call."""
    await quote(order, cents)
    decision = await perdure.wait_for_signal(
        "approval",
        details={"tool": "refund", "arguments": {"order": order}, "amount": cents},
    )
    if not decision.get("approved"):
        return "refund rejected"
    return await pay_out(order, cents)


@perdure.effect()
async def wire(order: str, cents: int) -> str:
    # The receiver cannot dedupe and the call's fate is unknown (a timeout after send).
    raise perdure.OutcomeUnknownError(f"wire of {cents} for {order}: connection reset after send")


@perdure.workflow
async def transfer(order: str, cents: int) -> str:
    receipt = await wire(order, cents)
    return f"transfer done: {receipt}"


@perdure.step
async def fetch_invoice(order: str) -> str:
    raise perdure.PermanentError(f"invoice for {order} not found (HTTP 404)")


@perdure.workflow
async def reconcile_invoice(order: str) -> str:
    """Fails for good at its first step (what a failed run looks like)."""
    return await fetch_invoice(order)


@perdure.workflow
async def two_sign_offs(order: str) -> str:
    """Two approvals in a row: a page showing the first must not answer the second."""
    manager = await perdure.wait_for_signal("approval", details={"order": order, "by": "manager"})
    finance = await perdure.wait_for_signal("approval", details={"order": order, "by": "finance"})
    return f"manager {manager.get('approved')}, finance {finance.get('approved')}"
