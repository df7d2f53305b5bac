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


#: The modules of core an adapter or a backend may import: the application's surface, the
#: SPI (the contract for their authors) and the public test kit. The rest is private.
CORE_CONTRACT = ("perdure", "perdure.spi", "perdure.testing")


def _core_imports_outside_contract(source: str, filename: str) -> list[str]:
    """``file:line imports perdure.<x>`` for each import of core that is not in the
    contract, including ``from perdure import _x`` (a private module by another spelling)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "perdure":
            # 'from perdure import RunStatus' takes a public name; '_x' is a private module
            modules = [f"perdure.{alias.name}" for alias in node.names if alias.name[0] == "_"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [
            f"{filename}:{node.lineno} imports {module}"
            for module in modules
            if module.split(".")[0] == "perdure" and not _in_contract(module)
        ]
    return found


def _in_contract(module: str) -> bool:
    return module in CORE_CONTRACT or module.startswith("perdure.testing.")


@pytest.mark.parametrize("package", sorted(name for name in PACKAGES if name != "perdure"))
def test_adapters_and_backends_import_only_the_core_contract(package: str) -> None:
    found = [
        line
        for path in sorted(PACKAGES[package].rglob("*.py"))
        for line in _core_imports_outside_contract(
            path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
        )
    ]
    assert not found, "import these from perdure.spi instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "from perdure._errors import ConfigurationError",
        "import perdure._engine.owners",
        "from perdure import _operator as operator",
        "from perdure._stores import sqlite",
    ],
)
def test_the_contract_check_names_a_private_import(line: str) -> None:
    source = f"import perdure\nfrom perdure.spi import StepSpec\n\ndef f():\n    {line}\n"
    found = _core_imports_outside_contract(source, "perdure_x/mod.py")
    assert len(found) == 1 and found[0].startswith("perdure_x/mod.py:5 imports perdure.")
