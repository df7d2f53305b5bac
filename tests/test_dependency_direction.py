"""The workspace's dependency direction (DESIGN.md, Layout): adapters and backends depend on
core; core depends on none of them; an adapter never imports a backend or the other
adapter, and a backend never imports an adapter.

Read from the import statements of every source file, so a lazy import inside a function
counts too (``perdure demo`` once imported the Agents SDK adapter from LangGraph's demo).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "perdure": ROOT / "packages/core/src/perdure",
    "perdure_langgraph": ROOT / "packages/langgraph_adapter/src/perdure_langgraph",
    "perdure_openai_agents": ROOT / "packages/openai_agents_adapter/src/perdure_openai_agents",
    "perdure_temporal": ROOT / "packages/temporal_backend/src/perdure_temporal",
    "perdure_dbos": ROOT / "packages/dbos_backend/src/perdure_dbos",
}
#: What each package may import of the workspace besides itself.
ALLOWED = {
    "perdure": set[str](),
    "perdure_langgraph": {"perdure"},
    "perdure_openai_agents": {"perdure"},
    "perdure_temporal": {"perdure"},
    "perdure_dbos": {"perdure"},
}


def _imported(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_package_imports_only_what_it_depends_on(package: str) -> None:
    files = sorted(PACKAGES[package].rglob("*.py"))
    assert files, f"no sources found for {package} under {PACKAGES[package]}"
    forbidden = set(PACKAGES) - ALLOWED[package] - {package}
    found = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _imported(path) & forbidden
    }
    assert not found, "\n".join(sorted(found))
