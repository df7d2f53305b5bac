"""``perdure runs list | show | export``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from perdure.cli.common import UsageProblem, connected, out, parse_duration, parse_statuses
from perdure.cli.render import history_table, last_suspension, pending_details, run_fields
from perdure.cli.render import runs_table as make_runs_table
from perdure.records import RunStatus


def _line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


async def list_runs(
    url: str | None,
    statuses: Sequence[str] | None,
    older_than: str | None,
    workflow: str | None,
    limit: int,
    as_json: bool,
) -> None:
    wanted = parse_statuses(statuses)
    age = None if older_than is None else parse_duration("--older-than", older_than)
    async with connected(url) as backend:
        runs = await backend.list_runs(
            statuses=wanted, older_than=age, workflow=workflow, limit=limit
        )
        if as_json:
            for info in runs:
                sys.stdout.write(_line(info.to_json()) + "\n")
            return
        # A suspended run shows what is pending (an adapter's tool call awaiting
        # approval) in its attention field, set by wait_for_signal(details=...).
        pending: dict[str, dict[str, Any]] = {
            info.run_id: info.attention
            for info in runs
            if info.status is RunStatus.SUSPENDED and info.waiting_for and info.attention
        }
    console = out()
    if not runs:
        console.print("no runs match", markup=False)
        return
    console.print(make_runs_table(runs, pending))


async def show_run(url: str | None, run_id: str) -> None:
    async with connected(url) as backend:
        info = await backend.get_run(run_id)
        events = await backend.history(run_id)
    pending = (
        pending_details(last_suspension(events)) if info.status is RunStatus.SUSPENDED else None
    )
    console = out()
    console.print(run_fields(info, pending))
    console.print()
    console.print(history_table(events))


async def export_run(url: str | None, run_id: str, output: Path | None) -> None:
    async with connected(url) as backend:
        info = await backend.get_run(run_id)
        events = await backend.history(run_id)
    lines = [_line({"run": info.to_json()}), *(_line(ev.to_json()) for ev in events)]
    if output is None:
        _write(sys.stdout, lines)
        return
    try:
        with output.open("w", encoding="utf-8") as fh:
            _write(fh, lines)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageProblem(f"--output {str(output)!r}: cannot write: {reason}") from exc
    out().print(
        f"exported run {run_id} ({len(events)} events) to {output}", markup=False, soft_wrap=True
    )


def _write(fh: IO[str], lines: Sequence[str]) -> None:
    for line in lines:
        fh.write(line + "\n")
    fh.flush()
