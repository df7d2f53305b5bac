"""``perdure audit`` for the Agents SDK: an agent's tools, agents-as-tools, handoffs and
MCP servers, with the policy each is recorded under (see ``_wrap.durable_tool``).

MCP servers list their tools only once connected (a subprocess or the network), so a
server is reported by itself, plus the tools its static ``tool_filter`` allows and those
``[tool.perdure.tools]`` declares as ``mcp:SERVER.TOOL``.
"""

from __future__ import annotations

from typing import Any, cast

from agents import Agent, FunctionTool, Handoff
from agents.mcp import MCPServer

from perdure.spi import Audit, AuditEntry, declaration_of, find_locator, policy_of, source_of
from perdure_openai_agents import _compat
from perdure_openai_agents._wrap import declared_spec

_UNDECLARED_TOOL = "recorded as a step without retry, so a crash mid-call calls it again"


def inspect_object(obj: Any, audit: Audit) -> bool:
    """Report ``obj`` if it is an Agents SDK agent."""
    if not isinstance(obj, Agent):
        return False
    agent = cast(Agent[Any], obj)
    owner = f"agent {agent.name}"
    for tool in agent.tools:
        _tool(tool, owner, audit)
    for entry in agent.handoffs:
        _handoff(entry, owner, audit)
    for server in agent.mcp_servers:
        _mcp_server(server, owner, audit)
    return True


def _approval(tool: FunctionTool) -> str | None:
    needs = tool.needs_approval
    if callable(needs):
        return "conditional"
    return "always" if needs else None


def _tool(tool: Any, owner: str, audit: Audit) -> None:
    if not isinstance(tool, FunctionTool):
        audit.add(
            AuditEntry(
                owner,
                "hosted-tool",
                str(getattr(tool, "name", type(tool).__name__)),
                "undeclared",
                note=f"{type(tool).__name__} runs outside perdure's records",
            )
        )
        return
    fn = tool.__wrapped__ if hasattr(tool, "__wrapped__") else None
    defined, location = source_of(fn) if fn is not None else (None, None)
    approval = _approval(tool)
    inner = _compat.agent_of_tool(tool)
    if isinstance(inner, Agent):
        audit.add(
            AuditEntry(
                owner,
                "agent-tool",
                tool.name,
                "container",
                defined_in=find_locator(inner),
                approval=approval,
                note=f"runs agent {inner.name} (its tools are listed under it)",
            )
        )
        audit.visit(inner)
        return
    marked = declared_spec(tool)
    spec = marked or declaration_of(fn)
    audit.add(
        AuditEntry(
            owner,
            "function-tool",
            tool.name,
            "undeclared" if spec is None else policy_of(spec),
            defined_in=defined,
            location=location,
            declared_by=None
            if spec is None
            else ("durable_tool" if marked is not None else f"@perdure.{spec.kind}"),
            approval=approval,
            note=_UNDECLARED_TOOL if spec is None else "",
        )
    )


def _handoff(entry: Any, owner: str, audit: Audit) -> None:
    target: Any = entry
    name = getattr(entry, "name", "?")
    if isinstance(entry, Handoff):
        target = _compat.handoff_target(entry)
        name = entry.agent_name
    audit.add(
        AuditEntry(
            owner,
            "handoff",
            str(name),
            "container",
            defined_in=None if target is None else find_locator(target),
            note=f"hands off to agent {name} (its tools are listed under it)",
        )
    )
    if isinstance(target, Agent):
        audit.visit(target)


def _mcp_server(server: Any, owner: str, audit: Audit) -> None:
    name = server.name if isinstance(server, MCPServer) else type(server).__name__
    prefix = f"mcp:{name}"
    allowed: list[str] = []
    static = getattr(server, "tool_filter", None)
    if isinstance(static, dict):
        allowed = [str(t) for t in cast(dict[str, Any], static).get("allowed_tool_names") or []]
    listed = (
        f"its tool_filter allows only {', '.join(allowed)} (listed below)"
        if allowed
        else "its tools are known only once it is connected"
    )
    audit.add(
        AuditEntry(
            owner,
            "mcp-server",
            name,
            "container" if allowed else "undeclared",
            key=prefix,
            defined_in=find_locator(server),
            note=f"{listed}; perdure does not wrap MCP tool calls: declare them as "
            f"'{prefix}.TOOL' (or the whole server as '{prefix}') in [tool.perdure.tools]",
        )
    )
    declared = [key.removeprefix(prefix + ".") for key, _ in audit.declared_under(prefix + ".")]
    for tool in dict.fromkeys([*allowed, *declared]):
        audit.add(
            AuditEntry(owner, "mcp-tool", f"{name}.{tool}", "undeclared", key=f"{prefix}.{tool}")
        )
