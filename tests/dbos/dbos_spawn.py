"""Start a DBOS run in a process of its own (``dbos_drive``), for the crash tests."""

from __future__ import annotations

import json
from typing import Any

from perdure.testing import Process, Processes


def drive(
    processes: Processes,
    workflow: str,
    *args: Any,
    run_id: str,
    count: int | None = None,
    **env: str,
) -> Process:
    """Start ``run_id`` (or ``count`` runs ``run_id-i``) in a new process that exits once
    they stop or suspend."""
    extra = [] if count is None else ["--count", str(count)]
    return processes.spawn(
        "-m",
        "dbos_drive",
        "--url",
        processes.url,
        "--module",
        "dbos_flows",
        "--workflow",
        workflow,
        "--run-id",
        run_id,
        "--input",
        json.dumps({"args": list(args), "kwargs": {}}),
        *extra,
        env=env,
    )
