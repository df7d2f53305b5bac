"""Agents for ``perdure audit``: an undeclared tool, a third-party tool, an agent used
as a tool, a handoff and two MCP server objects (never connected: no network)."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool
from agents.mcp import MCPServerStdio, create_static_tool_filter

import perdure
from perdure_openai_agents import durable_tool


@function_tool
def delete_account(user_id: str) -> str:
    """Delete a user's account (not declared: the audit must say so)."""
    return user_id


@function_tool
def vendor_search(query: str) -> str:
    """Stands for a third-party toolkit's tool, declared in [tool.perdure.tools]."""
    return query


@function_tool(needs_approval=True)
@perdure.effect()
def wire_money(account: str, cents: int) -> str:
    """An effect that always needs approval."""
    return f"{account}:{cents}"


@function_tool
def ship_parcel(order_id: str) -> str:
    """Declared through durable_tool (a tool the user builds but does not decorate)."""
    return order_id


filesystem = MCPServerStdio(
    params={"command": "mcp-filesystem-server", "args": ["/srv"]}, name="filesystem"
)
calendar = MCPServerStdio(
    params={"command": "mcp-calendar-server"},
    name="calendar",
    tool_filter=create_static_tool_filter(allowed_tool_names=["list_events", "add_event"]),
)

billing_agent: Agent[Any] = Agent(
    name="billing",
    tools=[wire_money, durable_tool(ship_parcel, idempotent_receiver=True)],
)
researcher: Agent[Any] = Agent(name="researcher", tools=[vendor_search])
support_agent: Agent[Any] = Agent(
    name="support",
    tools=[delete_account, researcher.as_tool("research", "Research a question.")],
    handoffs=[billing_agent],
    mcp_servers=[filesystem, calendar],
)
