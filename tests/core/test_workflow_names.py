"""A workflow's name is what a worker that imports its module will register."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import perdure
from perdure._workflow import registered_workflows

@perdure.workflow
async def refund(order_id: str) -> str:
    return order_id

print(registered_workflows())
"""


def test_a_script_run_as_main_names_its_workflows_by_its_importable_module(
    tmp_path: Path,
) -> None:
    (tmp_path / "refunds.py").write_text(SCRIPT)
    as_script = subprocess.run(
        [sys.executable, "refunds.py"], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    as_module = subprocess.run(
        [sys.executable, "-c", "import refunds"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    )
    assert "'refunds:refund'" in as_script.stdout
    assert as_script.stdout == as_module.stdout
