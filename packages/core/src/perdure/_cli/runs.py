"""``perdure runs list | show | export``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from perdure import _retention as retention
from perdure._cli.common import (
    UsageProblem,
    connected,
    err,
    out,
    parse_duration,
    parse_statuses,
)
from perdure._cli.render import (
    history_table,
    last_suspension,
    pending_details,
    run_fields,
    stats_table,
)
from perdure._cli.render import runs_table as make_runs_table
from perdure._records import RunStatus
from perdure._revealed import revealed_events, revealed_run
from perdure._summary import summarize

#: Runs ``perdure stats`` reads: the console's window.
WINDOW = 2000


def _line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


#: ``--stuck`` without ``--older-than``: waiting this long is stuck.
STUCK_AFTER = "1h"


async def list_runs(
    url: str | None,
    statuses: Sequence[str] | None,
    older_than: str | None,
    workflow: str | None,
    limit: int,
    as_json: bool,
    stuck: bool = False,
) -> None:
    wanted = parse_statuses(statuses)
    if stuck:
        if wanted is not None:
            raise UsageProblem("--stuck picks suspended and needs-attention runs; drop --status")
        wanted = [RunStatus.SUSPENDED, RunStatus.NEEDS_ATTENTION]
        older_than = older_than or STUCK_AFTER
    age = None if older_than is None else parse_duration("--older-than", older_than)
    async with connected(url) as backend:
        runs = await backend.list_runs(
            statuses=wanted, older_than=age, workflow=workflow, limit=limit
        )
        runs = [revealed_run(info) for info in runs]
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
        info = revealed_run(await backend.get_run(run_id))
        events = revealed_events(await backend.history(run_id))
    pending = (
        pending_details(last_suspension(events)) if info.status is RunStatus.SUSPENDED else None
    )
    console = out()
    console.print(run_fields(info, pending))
    console.print()
    console.print(history_table(events))


async def export_run(url: str | None, run_id: str, output: Path | None) -> None:
    async with connected(url) as backend:
        info = revealed_run(await backend.get_run(run_id))
        events = revealed_events(await backend.history(run_id))
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


async def stats(url: str | None, as_json: bool) -> None:
    """The summary bar's figures (over the newest runs the console reads too)."""
    async with connected(url) as backend:
        runs = await backend.list_runs(limit=WINDOW + 1)
    now = time.time()
    summary = summarize(runs[:WINDOW], now, truncated=len(runs) > WINDOW)
    if as_json:
        oldest = summary.oldest_waiting
        doc = {
            "counts": {s.value: n for s, n in summary.counts.items()},
            "total": summary.total,
            "truncated": summary.truncated,
            "oldest_waiting": None
            if oldest is None
            else {
                "run_id": oldest.run_id,
                "status": oldest.status.value,
                "waiting_for": oldest.waiting_for,
                "age_seconds": round(summary.oldest_age, 3),
            },
            "waiting_by_signal": summary.waiting_by_signal,
        }
        sys.stdout.write(_line(doc) + "\n")
        return
    out().print(stats_table(summary, now))


async def prune(
    url: str | None,
    older_than: str,
    statuses: Sequence[str] | None,
    export_dir: Path | None,
    dry_run: bool,
) -> None:
    age = parse_duration("--older-than", older_than)
    wanted = parse_statuses(statuses) or list(retention.FINISHED)
    unfinished = [s.value for s in wanted if not s.terminal]
    if unfinished:
        raise UsageProblem(
            f"--status {', '.join(unfinished)}: prune deletes finished runs only "
            "(succeeded, failed, cancelled)"
        )
    console = out()
    async with connected(url) as backend:
        with Progress(
            TextColumn("pruning"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err(),
            transient=True,
        ) as bar:
            task = bar.add_task("prune", total=None)

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            report = await retention.prune(
                backend,
                older_than=age,
                statuses=wanted,
                export_dir=export_dir,
                dry_run=dry_run,
                progress=advance,
            )
    which = "/".join(s.value for s in wanted)
    if dry_run:
        console.print(
            f"{report.matched} {which} run(s) not updated for {older_than} would be deleted",
            markup=False,
        )
        return
    exported = f"; exported {report.exported} to {report.export_dir}" if report.export_dir else ""
    console.print(
        f"deleted {report.deleted} of {report.matched} {which} run(s) not updated for "
        f"{older_than}{exported}",
        markup=False,
        soft_wrap=True,
    )
