"""``perdure audit MODULE[:ATTR]...``: the tool inventory as a table or JSON, and the
``--strict`` deploy gate."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from rich.table import Table

from perdure._audit import Audit, Entry, audit_objects, load_declarations
from perdure._audit_mcp import add_live, list_servers, load_mcp_servers
from perdure._cli.common import EXIT_CONFIG, EXIT_INVALID_STATE, CliError, UsageProblem, out
from perdure._cli.worker import import_targets


class Format(str, Enum):
    TABLE = "table"
    JSON = "json"


#: Policy → how the table shows it.
_POLICY_LABEL = {
    "step": "step (read-only/pure)",
    "effect": "effect, intent-before-action",
    "effect-idempotent": "effect, idempotent receiver",
    "delegates": "calls declared steps",
    "container": "-",
    "undeclared": "[bold red]undeclared[/]",
}


def _split(target: str) -> tuple[str, str | None]:
    module, sep, attr = target.rpartition(":")
    if sep and module and attr and all(p.isidentifier() for p in attr.split(".")):
        return module, attr
    return target, None


def _resolve(targets: Sequence[str]) -> list[Any]:
    """The objects named: each module (imported as ``perdure worker`` does), or its
    attribute ``ATTR``."""
    split = [_split(t) for t in targets]
    names = import_targets([module for module, _ in split])
    objects: list[Any] = []
    for name, (_, attr) in zip(names, split, strict=True):
        obj: Any = sys.modules[name]
        for part in attr.split(".") if attr else []:
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise UsageProblem(f"module {name!r} has no attribute {attr!r}") from None
        objects.append(obj)
    return objects


def run_audit(targets: Sequence[str], fmt: Format, strict: bool) -> int:
    servers_from, servers = load_mcp_servers(Path.cwd())
    if not targets and not servers:
        raise UsageProblem(
            "name the MODULE[:ATTR] defining the agents or graphs, or configure MCP servers "
            "in [tool.perdure.mcp] of pyproject.toml"
        )
    objects = _resolve(targets)
    source, declarations = load_declarations(Path.cwd())
    audit = audit_objects(objects, declarations)
    if servers:
        if importlib.util.find_spec("mcp") is None:
            raise CliError(
                f"[tool.perdure.mcp] in {servers_from}: listing MCP servers needs the mcp "
                "package: pip install 'perdure[gateway]'",
                EXIT_CONFIG,
            )
        for name, listed in asyncio.run(list_servers(servers)).items():
            add_live(audit, name, listed)
    if fmt is Format.JSON:
        print(json.dumps(_as_json(audit, targets, source), indent=2))
    else:
        _print_table(audit, source)
    return EXIT_INVALID_STATE if strict and audit.gating() else 0


def _as_json(audit: Audit, targets: Sequence[str], source: Path | None) -> dict[str, Any]:
    return {
        "targets": list(targets),
        "declarations": None if source is None else str(source),
        "entries": [e.as_json() for e in audit.entries],
        "undeclared": len(audit.gating()),
        "unmatched_declarations": audit.unmatched(),
    }


def _defined(entry: Entry) -> str:
    """``module:qualname (file.py:line)``: short enough for a table cell."""
    if entry.location is None:
        return entry.defined_in or ""
    file, _, line = entry.location.rpartition(":")
    short = f"{Path(file).name}:{line}"
    return f"{entry.defined_in} ({short})" if entry.defined_in else short


def _print_table(audit: Audit, source: Path | None) -> None:
    console = out()
    table = Table(title="perdure audit", title_justify="left")
    for column in ("owner", "kind", "name", "policy", "approval", "declared by", "defined in"):
        table.add_column(column, overflow="fold")
    table.add_column("finding", overflow="fold", ratio=1)
    for e in audit.entries:
        table.add_row(
            e.owner,
            e.kind,
            e.name,
            _POLICY_LABEL[e.policy],
            e.approval or "",
            e.declared_by or "",
            _defined(e),
            e.finding,
        )
    console.print(table)
    undeclared = audit.gating()
    where = f"; declarations from {source}" if source is not None else ""
    console.print(
        f"{len(audit.entries)} entries, {len(undeclared)} undeclared{where}", markup=False
    )
    unmatched = audit.unmatched()
    if unmatched:
        console.print(
            f"[tool.perdure.tools] in {source} declares what no audited tool is called: "
            + ", ".join(unmatched)
            + " (a typo, or a tool renamed or removed?)",
            markup=False,
        )
    if undeclared:
        console.print(
            "declare them with @perdure.step / @perdure.effect(idempotent_receiver=...), "
            "durable_tool(...), or in [tool.perdure.tools] of pyproject.toml",
            markup=False,
        )
