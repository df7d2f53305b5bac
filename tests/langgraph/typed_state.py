"""State of every type LangGraph's own savers round-trip, for the serialization tests."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from typing import Any, TypedDict

from langchain_core.agents import AgentAction
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.types import Command, Send
from pydantic import BaseModel


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


class Customer(BaseModel):
    name: str
    tier: Tier
    since: dt.datetime


@dataclasses.dataclass
class Order:
    order_id: uuid.UUID
    cents: int
    receipt: bytes


class TypesGraphState(TypedDict, total=False):
    messages: list[BaseMessage]
    customer: Customer
    order: Order
    tier: Tier
    action: AgentAction
    send: Send
    command: Command[Any]
    when: dt.datetime
    uid: uuid.UUID
    raw: bytes


def round_trip_values() -> dict[str, Any]:
    when = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    return {
        "messages": [
            HumanMessage("refund order 42", id="m1"),
            AIMessage("", id="m2", tool_calls=[{"name": "refund", "args": {"o": 42}, "id": "c1"}]),
            ToolMessage("done", tool_call_id="c1", id="m3"),
        ],
        "customer": Customer(name="Ada", tier=Tier.GOLD, since=when),
        "order": Order(uuid.UUID(int=42), 4200, b"\x00\x01"),
        "tier": Tier.SILVER,
        "action": AgentAction(tool="refund", tool_input={"order": 42}, log="refunding"),
        "send": Send("charge", {"order": 42}),
        "command": Command(goto="charge", update={"n": 1}),
        "when": when,
        "uid": uuid.UUID(int=7),
        "raw": b"\xff\xfe",
    }
