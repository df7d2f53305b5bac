"""The demo's refund agent: module level, so ``perdure worker`` can import and resume it.

Three tools: a read-only ``lookup_order``, ``charge_refund`` against a payment service that
dedupes on ``Idempotency-Key`` (approval needed above ``APPROVAL_THRESHOLD_CENTS``), and
``send_email`` against a relay that does not dedupe. Without ``OPENAI_API_KEY`` the agent
runs on a ``ConversationModel`` whose replies follow from the conversation alone (``respond``),
so a resumed worker meets the same calls as the one that died; with a key it runs on a real
model.

The services' address comes from ``PERDURE_DEMO_SERVICES`` (the demo sets it for its
worker processes).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from agents import Agent, RunContextWrapper, function_tool

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
from perdure_openai_agents.testing import Conversation, ConversationModel, Reply, tool_call

#: What the real model runs on when ``OPENAI_API_KEY`` is set.
REAL_MODEL = "gpt-4.1-mini"

INSTRUCTIONS = (
    "You are a refund agent. Look the order up with lookup_order, refund its full amount "
    "with charge_refund, then tell the customer with send_email. Call one tool at a time. "
    "If the refund is rejected, say so and do not send an email."
)


def _services() -> str:
    url = os.environ.get(SERVICES_ENV)
    if not url:
        raise RuntimeError(f"{SERVICES_ENV} is not set: run this agent through `perdure demo`")
    return url.rstrip("/")


# -- tools ------------------------------------------------------------------------------------


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order (read-only).

    Args:
        order_id: The order's id.
    """
    order = ORDERS.get(order_id)
    return json.dumps(order if order is not None else {"error": f"no order {order_id}"})


async def _over_threshold(
    ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
) -> bool:
    """Refunds above the threshold wait for a human."""
    return int(params.get("amount_cents", 0)) > APPROVAL_THRESHOLD_CENTS


@function_tool(needs_approval=_over_threshold, failure_error_function=None)
@perdure.effect(idempotent_receiver=True)
def charge_refund(order_id: str, amount_cents: int) -> str:
    """Refund an order to the customer's card through the payment service.

    Args:
        order_id: The order's id.
        amount_cents: The amount to refund, in cents.
    """
    answer = post(
        f"{_services()}/dedup/{PAYMENTS}",
        {"order_id": order_id, "amount_cents": amount_cents},
        key=perdure.idempotency_key(),
    )
    return json.dumps({"charge_id": answer["id"], "duplicate": answer["duplicate"]})


@function_tool(failure_error_function=None)
@perdure.effect()
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to a customer through the mail relay (it does not dedupe).

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The message.
    """
    answer = post(f"{_services()}/plain/{EMAIL}", {"to": to, "subject": subject, "body": body})
    return json.dumps({"message_id": answer["id"]})


# -- the scripted model -----------------------------------------------------------------------


def _json(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def respond(conv: Conversation) -> Reply:
    """The refund flow as a pure function of the conversation so far.

    No tool output yet → ``lookup_order``; after the lookup → ``charge_refund``; after the
    charge → ``send_email``; after the email (or a rejected charge) → the final answer.
    """
    match = re.search(r"\d+", " ".join(conv.user_messages))
    order_id = match.group(0) if match else "0"
    if conv.output_of("lookup_order") is None:
        return tool_call("lookup_order", {"order_id": order_id})
    order = _json(conv.output_of("lookup_order"))
    if "amount_cents" not in order:
        return f"I could not find order {order_id}."
    amount = int(order["amount_cents"])
    charged = conv.output_of("charge_refund")
    if charged is None:
        return tool_call("charge_refund", {"order_id": order_id, "amount_cents": amount})
    charge = _json(charged)
    if "charge_id" not in charge:
        return f"The refund for order {order_id} was not made: {charged}"
    if conv.output_of("send_email") is None:
        return tool_call(
            "send_email",
            {
                "to": order["customer"],
                "subject": f"Your refund for order {order_id}",
                "body": f"We refunded {dollars(amount)} for your {order['item']}.",
            },
        )
    return (
        f"Refunded {dollars(amount)} for order {order_id} (charge {charge['charge_id']}); "
        f"{order['customer']} has been told."
    )


def uses_real_model() -> bool:
    """True when ``OPENAI_API_KEY`` is set: the agent then calls a real OpenAI model."""
    return bool(os.environ.get("OPENAI_API_KEY"))


refund_agent: Agent[Any] = Agent(
    name="refund-agent",
    instructions=INSTRUCTIONS,
    model=REAL_MODEL if uses_real_model() else ConversationModel(respond),
    tools=[lookup_order, charge_refund, send_email],
)
