"""The demo's refund graph: module level, so ``perdure worker`` can import and resume it.

``lookup`` (a recorded step) → ``review`` (``interrupt()`` for a human above
``APPROVAL_THRESHOLD_CENTS``) → ``charge`` (a payment service that dedupes on
``Idempotency-Key``) → ``notify`` (a mail relay that does not dedupe). The services'
address comes from ``PERDURE_DEMO_SERVICES`` (the demo sets it for its processes).

``python -m perdure_langgraph.demo_graph --url URL --run-id ID --order 42`` is the demo's
app process: it starts the thread and drives it whenever it is due, until it ends or the
demo kills it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import perdure
from perdure.testing.demo.services import (
    APPROVAL_THRESHOLD_CENTS,
    EMAIL,
    ORDERS,
    PAYMENTS,
    SERVICES_ENV,
    dollars,
)
from perdure.testing.receivers import post
from perdure_langgraph.durable import DurableGraph, durable


class RefundState(TypedDict, total=False):
    order_id: str
    order: dict[str, Any]
    approved: bool
    charge: dict[str, Any]
    email: dict[str, Any]
    summary: str


def _services() -> str:
    url = os.environ.get(SERVICES_ENV)
    if not url:
        raise RuntimeError(f"{SERVICES_ENV} is not set: run this graph through `perdure demo`")
    return url.rstrip("/")


@perdure.step
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look the order up (read-only, recorded)."""
    return ORDERS.get(order_id) or {"order_id": order_id, "error": "no such order"}


@perdure.effect(idempotent_receiver=True)
def charge_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund through the payment service, which dedupes on the idempotency key."""
    answer = post(
        f"{_services()}/dedup/{PAYMENTS}",
        {"order_id": order_id, "amount_cents": amount_cents},
        key=perdure.idempotency_key(),
    )
    return {"charge_id": answer["id"], "duplicate": answer["duplicate"]}


@perdure.effect()
def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
    """Tell the customer through the mail relay (it does not dedupe)."""
    answer = post(f"{_services()}/plain/{EMAIL}", {"to": to, "subject": subject, "body": body})
    return {"message_id": answer["id"]}


async def lookup(state: RefundState) -> dict[str, Any]:
    return {"order": await lookup_order(state.get("order_id", ""))}


async def review(state: RefundState) -> dict[str, Any]:
    order = state.get("order") or {}
    amount = int(order.get("amount_cents", 0))
    if "error" in order:
        return {"approved": False, "summary": f"I could not find order {state.get('order_id')}."}
    if amount <= APPROVAL_THRESHOLD_CENTS:
        return {"approved": True}
    decision = interrupt(
        {
            "tool": "charge_refund",
            "arguments": {"order_id": order["order_id"], "amount_cents": amount},
            "reason": f"refunds above {dollars(APPROVAL_THRESHOLD_CENTS)} need approval",
        }
    )
    approved = bool(decision.get("approved")) if isinstance(decision, dict) else bool(decision)
    summary = None if approved else f"The refund for order {order['order_id']} was rejected."
    return {"approved": approved, **({"summary": summary} if summary else {})}


def after_review(state: RefundState) -> str:
    return "charge" if state.get("approved") else END


async def charge(state: RefundState) -> dict[str, Any]:
    order = state.get("order") or {}
    return {"charge": await charge_refund(order["order_id"], int(order["amount_cents"]))}


async def notify(state: RefundState) -> dict[str, Any]:
    order = state.get("order") or {}
    amount = dollars(int(order["amount_cents"]))
    sent = await send_email(
        order["customer"],
        f"Your refund for order {order['order_id']}",
        f"We refunded {amount} for your {order['item']}.",
    )
    charge_id = (state.get("charge") or {}).get("charge_id")
    return {
        "email": sent,
        "summary": (
            f"Refunded {amount} for order {order['order_id']} (charge {charge_id}); "
            f"{order['customer']} has been told."
        ),
    }


def build() -> StateGraph:
    """lookup → review → charge → notify."""
    builder = StateGraph(RefundState)
    builder.add_node("lookup", lookup)
    builder.add_node("review", review)
    builder.add_node("charge", charge)
    builder.add_node("notify", notify)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "review")
    builder.add_conditional_edges("review", after_review, ["charge", END])
    builder.add_edge("charge", "notify")
    builder.add_edge("notify", END)
    return builder


refund_graph: DurableGraph = durable(build().compile(name="refund-graph"))


async def drive(order_id: str, run_id: str, url: str) -> None:
    """Start the thread whose first turn is ``run_id`` (``THREAD#1``) and drive it
    whenever it is due, until it stops."""
    perdure.configure(url)
    thread_id = run_id.rpartition("#")[0]
    try:
        await refund_graph.ainvoke(
            {"order_id": order_id}, {"configurable": {"thread_id": thread_id}}
        )
        backend = await perdure.connect(url)
        await backend.wait(run_id, drive=True)
    finally:
        await perdure.shutdown()


def main() -> None:
    """Parse ``--url --run-id --order`` and drive the thread."""
    parser = argparse.ArgumentParser(prog="python -m perdure_langgraph.demo_graph")
    parser.add_argument("--url", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--order", required=True)
    ns = parser.parse_args()
    asyncio.run(drive(ns.order, ns.run_id, ns.url))


if __name__ == "__main__":
    main()
