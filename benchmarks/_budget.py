"""A benchmark module's time budget, declared by the module itself.

A module sets ``BENCH_BUDGET_SECONDS = <number>`` at its top level: the seconds a full
run may take on this machine (the harness reports a run over it, and kills it at twice
that). The harness reads the constant from the source, without importing the module
(importing would start its frameworks in the harness's process).
"""

from __future__ import annotations

import ast
from pathlib import Path

NAME = "BENCH_BUDGET_SECONDS"
#: The budget of a module that declares none.
DEFAULT_SECONDS = 240.0


class BudgetError(ValueError):
    """A module's ``BENCH_BUDGET_SECONDS`` is not a positive number literal."""


def _assigned(node: ast.stmt) -> ast.expr | None:
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == NAME for t in node.targets
    ):
        return node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.value if node.target.id == NAME else None
    return None


def declared(source: Path) -> float:
    """The budget ``source`` declares, else ``DEFAULT_SECONDS``."""
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    for node in tree.body:
        value = _assigned(node)
        if value is None:
            continue
        number = value.value if isinstance(value, ast.Constant) else None
        if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0:
            raise BudgetError(
                f"{source}:{node.lineno}: {NAME} must be a positive number of seconds, "
                f"got {ast.unparse(value)}"
            )
        return float(number)
    return DEFAULT_SECONDS
