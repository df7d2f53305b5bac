"""``perdure replay MODULE... [--run ID]``: check recorded histories against this code.

Run it before a deploy with the new code: every in-flight run of the modules'
workflows (or the one named) is replayed in memory; nothing runs and nothing is
written. Where the substrate replays code of its own (Temporal's ``perdure.run``
workflow, through Temporal's ``Replayer``), that replay is checked too. Exit 0 when
every history matches, 5 when one does not (the step is named).
"""

from __future__ import annotations

import dataclasses

from rich.table import Table

from perdure._cli.common import EXIT_INVALID_STATE, connected, out
from perdure._engine.replay_check import ReplayReport, check_replay
from perdure._records import RunStatus
from perdure._workflow import registered_workflows

IN_FLIGHT = (
    RunStatus.PENDING,
    RunStatus.RUNNING,
    RunStatus.SUSPENDED,
    RunStatus.NEEDS_ATTENTION,
)


async def replay(url: str | None, run_id: str | None, limit: int) -> int:
    reports: list[ReplayReport] = []
    async with connected(url) as backend:
        if run_id is not None:
            infos = [await backend.get_run(run_id)]
        else:
            names = set(registered_workflows())
            infos = [
                i
                for i in await backend.list_runs(statuses=IN_FLIGHT, limit=limit)
                if i.workflow in names
            ]
        for info in infos:
            report = await check_replay(info, await backend.history(info.run_id))
            problem = await backend.check_substrate_replay(info.run_id)
            if problem is not None and report.ok:
                report = dataclasses.replace(report, ok=False, step_key="-", error=problem)
            reports.append(report)
    table = Table("run", "workflow", "recorded steps", "verdict", box=None)
    for r in reports:
        verdict = (
            f"matches (next new step: {r.next_step})"
            if r.ok and r.next_step
            else "matches"
            if r.ok
            else f"DIFFERS at {r.step_key}: {r.error}"
        )
        table.add_row(r.run_id, r.workflow, str(r.recorded_steps), verdict)
    console = out()
    console.print(table)
    bad = [r for r in reports if not r.ok]
    console.print(f"{len(reports)} run(s) replayed, {len(bad)} differ from this code", markup=False)
    return EXIT_INVALID_STATE if bad else 0
