"""``perdure audit``: the inventory of tools, nodes and MCP servers, as a table and as
JSON, declarations from ``[tool.perdure.tools]``, and the ``--strict`` exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perdure._cli import app

HERE = Path(__file__).parent
AGENTS = str(HERE / "audit_agents.py")
GRAPHS = str(HERE / "audit_graphs.py")
ENV = {"COLUMNS": "250", "PERDURE_DEBUG": "", "NO_COLOR": "1"}


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test reads the pyproject.toml it writes (none by default)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def audit(*args: str) -> Any:
    return CliRunner().invoke(app, ["audit", *args], env=ENV)


def entries(*args: str) -> dict[tuple[str, str], dict[str, Any]]:
    result = audit(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    return {(e["owner"], e["name"]): e for e in report["entries"]}


def declare(tmp_path: Path, **tools: str) -> None:
    lines = "\n".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in tools.items())
    (tmp_path / "pyproject.toml").write_text(f"[tool.perdure.tools]\n{lines}\n")


def test_demo_agent_tools_and_their_policies() -> None:
    found = entries("perdure_openai_agents.demo_agent")
    owner = "agent refund-agent"
    assert set(found) == {(owner, "lookup_order"), (owner, "charge_refund"), (owner, "send_email")}
    lookup, charge, email = (
        found[owner, n] for n in ("lookup_order", "charge_refund", "send_email")
    )
    assert lookup["policy"] == "undeclared"
    assert lookup["finding"].startswith("undeclared: may have side effects")
    assert charge["policy"] == "effect-idempotent"
    assert charge["declared_by"] == "@perdure.effect"
    assert charge["approval"] == "conditional"
    assert charge["defined_in"] == "perdure_openai_agents.demo_agent:charge_refund"
    file, _, line = charge["location"].rpartition(":")
    assert file.endswith("demo_agent.py") and int(line) > 0
    assert email["policy"] == "effect"
    assert "intent recorded before the call" in email["finding"]


def test_demo_agent_table_and_strict() -> None:
    result = audit("perdure_openai_agents.demo_agent", "--strict")
    assert result.exit_code == 5
    rows = {line.split("│")[3].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert "undeclared" in rows["lookup_order"]
    assert "effect, idempotent receiver" in rows["charge_refund"]
    assert rows["charge_refund"].split("│")[5].strip() == "conditional"
    assert "effect, intent-before-action" in rows["send_email"]
    assert "3 entries, 1 undeclared" in result.stdout


def test_declaring_the_undeclared_tool_passes_strict(tmp_path: Path) -> None:
    declare(tmp_path, lookup_order="read-only")
    result = audit("perdure_openai_agents.demo_agent", "--strict")
    assert result.exit_code == 0, result.output
    assert "3 entries, 0 undeclared" in result.stdout
    found = entries("perdure_openai_agents.demo_agent")
    lookup = found["agent refund-agent", "lookup_order"]
    assert (lookup["policy"], lookup["declared_by"]) == ("step", "[tool.perdure.tools]")


def test_demo_graph_nodes() -> None:
    found = entries("perdure_langgraph.demo_graph:refund_graph")
    owner = "graph refund-graph"
    assert set(found) == {(owner, n) for n in ("lookup", "review", "charge", "notify")}
    assert found[owner, "charge"]["policy"] == "delegates"
    assert found[owner, "charge"]["calls"] == ["charge_refund (effect-idempotent)"]
    assert found[owner, "lookup"]["calls"] == ["lookup_order (step)"]
    assert found[owner, "notify"]["calls"] == ["send_email (effect)"]
    assert found[owner, "review"]["policy"] == "undeclared"
    assert audit("perdure_langgraph.demo_graph", "--strict").exit_code == 5


def test_fixture_agents_undeclared_third_party_and_mcp(tmp_path: Path) -> None:
    declare(
        tmp_path,
        vendor_search="read-only",
        **{"mcp:calendar": "effect", "mcp:filesystem.write_file": "effect"},
    )
    found = entries(AGENTS)
    assert found["agent support", "delete_account"]["policy"] == "undeclared"
    vendor = found["agent researcher", "vendor_search"]
    assert (vendor["policy"], vendor["declared_by"]) == ("step", "[tool.perdure.tools]")
    assert found["agent support", "research"]["kind"] == "agent-tool"
    assert found["agent support", "billing"]["kind"] == "handoff"
    wire = found["agent billing", "wire_money"]
    assert (wire["policy"], wire["approval"]) == ("effect", "always")
    ship = found["agent billing", "ship_parcel"]
    assert (ship["policy"], ship["declared_by"]) == ("effect-idempotent", "durable_tool")
    server = found["agent support", "filesystem"]
    assert (server["kind"], server["policy"], server["key"]) == (
        "mcp-server",
        "undeclared",
        "mcp:filesystem",
    )
    assert found["agent support", "filesystem.write_file"]["policy"] == "effect"
    # A static tool_filter names the server's tools; "mcp:calendar" declares them all.
    assert found["agent support", "calendar"]["policy"] == "container"
    for tool in ("list_events", "add_event"):
        assert found["agent support", f"calendar.{tool}"]["policy"] == "effect"
    result = audit(AGENTS, "--strict")
    assert result.exit_code == 5
    assert "delete_account" in result.stdout and "filesystem" in result.stdout


def test_fixture_graph_tool_node_and_subgraph() -> None:
    found = entries(GRAPHS)
    assert found["graph ops", "drop_table"]["policy"] == "undeclared"
    assert found["graph ops", "post_invoice"]["policy"] == "effect-idempotent"
    assert found["graph ops", "escalate"]["calls"] == ["page_oncall (effect)"]
    assert found["graph ops", "report"]["kind"] == "subgraph"
    assert found["graph summary", "summarize"]["policy"] == "undeclared"


def test_bad_declaration_is_a_configuration_error(tmp_path: Path) -> None:
    declare(tmp_path, lookup_order="safe")
    result = audit("perdure_openai_agents.demo_agent")
    assert result.exit_code == 6
    assert "'lookup_order' = 'safe'" in result.stderr and "pyproject.toml" in result.stderr


def test_an_object_that_is_no_agent_is_a_configuration_error() -> None:
    result = audit("perdure_openai_agents.demo_agent:INSTRUCTIONS")
    assert result.exit_code == 6
    assert "neither an agent nor a compiled graph" in result.stderr


def test_a_missing_attribute_is_a_usage_error() -> None:
    assert audit("perdure_openai_agents.demo_agent:nope").exit_code == 2


def test_a_declaration_that_names_no_tool_is_reported(tmp_path: Path) -> None:
    declare(tmp_path, lookup_order="read-only", lookup_ordr="read-only")
    result = audit("perdure_openai_agents.demo_agent", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["unmatched_declarations"] == ["lookup_ordr"]
    table = audit("perdure_openai_agents.demo_agent")
    assert "declares what no audited tool is called: lookup_ordr" in table.stdout


def test_mcp_servers_in_pyproject_are_listed_live(tmp_path: Path) -> None:
    server = json.dumps([sys.executable, str(HERE / "audit_mcp_server.py")])
    (tmp_path / "pyproject.toml").write_text(
        "[tool.perdure.mcp]\n"
        f"files = {server}\n"
        'gone = "http://127.0.0.1:1/mcp"\n'
        "[tool.perdure.tools]\n"
        '"mcp:files.touch" = "effect"\n'
    )
    found = entries()  # no module: the configured servers alone
    read = found["mcp server files", "files.read_file"]
    assert (read["policy"], read["declared_by"]) == ("step", "MCP readOnlyHint")
    delete = found["mcp server files", "files.delete_file"]
    assert delete["policy"] == "undeclared"
    assert "does not annotate it read-only" in delete["finding"]
    touch = found["mcp server files", "files.touch"]
    assert (touch["policy"], touch["declared_by"]) == ("effect", "[tool.perdure.tools]")
    gone = found["mcp server gone", "gone"]
    assert gone["policy"] == "undeclared"
    assert "could not list its tools" in gone["finding"]
    assert audit("--strict").exit_code == 5
