"""``perdure demo``: a refund agent that is SIGKILLed right after it charged, and still
charges exactly once.

The story, each part in its own OS process:

1. the app process starts the run with ``DurableRunner.start``; the agent looks the order
   up and asks to refund more than the threshold, so the run suspends for approval;
2. ``perdure approve RUN_ID --by demo-operator`` approves it from another process;
3. the app process takes the run up again and charges; the payment service applies the
   charge and the demo SIGKILLs the app process before it can record the outcome;
4. ``perdure worker perdure_openai_agents.demo_agent`` recovers the run: it replays the
   recorded steps, calls the payment service again with the same idempotency key (which
   answers with the first charge), sends the email and finishes.

Then it prints the run's timeline from its history and the payment ledger, which the
services kept in this process. Exit code 0 when every order was charged exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import perdure
from perdure.spi import EventKind, RunInfo, RunStatus
from perdure.testing.demo import story as S
from perdure.testing.demo.services import (
    APPROVAL_THRESHOLD_CENTS,
    PAYMENTS,
    SERVICES_ENV,
    DemoServices,
    dollars,
)
from perdure.testing.processes import Processes

ORDER_ID = S.ORDER_ID
PROMPT = f"Refund order {ORDER_ID}: the espresso machine arrived cracked."
AGENT_MODULE = "perdure_openai_agents.demo_agent"


def main(url: str | None = None) -> int:
    """Run the demo on ``url`` (default: a new SQLite file in a temp dir); 0 when every
    order was charged exactly once and the run succeeded, else 1."""
    console = S.console()
    with tempfile.TemporaryDirectory(prefix="perdure-demo-") as tmp:
        target = url or f"sqlite:///{Path(tmp) / 'perdure-demo.db'}"
        try:
            return asyncio.run(_demo(console, target, Path(tmp)))
        except S.DemoError as exc:
            console.print(f"[bold red]✗ demo failed:[/] {escape(str(exc))}")
            return 1


async def _demo(console: Console, url: str, tmp: Path) -> int:
    real = bool(os.environ.get("OPENAI_API_KEY"))
    story = S.Story(f"refund-{ORDER_ID}-{secrets.token_hex(3)}")
    with DemoServices() as services:
        env = {SERVICES_ENV: services.url}
        if not real:
            env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
        procs = Processes(url, env=env, cwd=tmp)
        _intro(console, url, services.url, story.run_id, real)
        try:
            info = await _tell(console, procs, services, story, url)
            history = await perdure.history(story.run_id, url=url)
        finally:
            procs.close()
            await perdure.shutdown()
        _timeline(console, story, history)
        return S.verdict(console, services, info)


def _intro(console: Console, url: str, services: str, run_id: str, real: bool) -> None:
    from perdure.spi import mask_url

    model = "gpt-4.1-mini (OPENAI_API_KEY is set)" if real else "scripted (no OPENAI_API_KEY)"
    console.rule("[bold]perdure demo[/]: a refund agent that survives a SIGKILL")
    grid = Table.grid(padding=(0, 2))
    grid.add_row("[dim]backend[/]", escape(mask_url(url)))
    grid.add_row("[dim]agent[/]", f"{AGENT_MODULE}:refund_agent, model {model}")
    grid.add_row(
        "[dim]services[/]",
        f"{services}: payment service (dedupes on Idempotency-Key), mail relay (does not)",
    )
    grid.add_row(
        "[dim]policy[/]", f"refunds above {dollars(APPROVAL_THRESHOLD_CENTS)} need approval"
    )
    grid.add_row("[dim]run[/]", f"{run_id}: [italic]{escape(PROMPT)}[/]")
    console.print(grid)
    console.print()


async def _tell(
    console: Console, procs: Processes, services: DemoServices, story: S.Story, url: str
) -> RunInfo:
    """Parts 1 to 4 of the story; the run as it ended."""
    hold = services.hold(PAYMENTS, "after")  # the first charge waits here once applied
    app = procs.spawn(
        "-m", "perdure_openai_agents.demo_start",
        "--url", url, "--run-id", story.run_id, "--prompt", PROMPT,
    )  # fmt: skip
    story.app_pid = app.pid
    story.mark(f"app process {app.pid} starts the run (DurableRunner.start)")
    console.print(
        f"[bold cyan]1[/] app process [bold]{app.pid}[/] starts the run with "
        "DurableRunner.start and drives it"
    )
    with console.status("agent looks the order up…"):
        info = await S.wait_run(url, story.run_id, app, "the approval request", S.stopped)
    if info.status is not RunStatus.SUSPENDED or info.waiting_for != perdure.APPROVAL:
        why = json.dumps(info.error or info.attention)
        raise S.DemoError(
            f"expected the run to wait for approval, it is {info.status.value}: {why}"
        )
    console.print(f"  [yellow]⏸[/] run suspended: {escape(S.pending(info))}")
    console.print("    no lease, thread or connection is held for the run while it waits")

    console.print(f"[bold cyan]2[/] [bold]perdure approve {story.run_id} --by {S.OPERATOR}[/]")
    story.mark(f"{S.OPERATOR} runs perdure approve (another process)")
    with console.status("approving from another process…"):
        done = await asyncio.to_thread(
            procs.cli, "approve", story.run_id, "--by", S.OPERATOR, "-m", "receipt checked"
        )
    if done.returncode != 0:
        raise S.DemoError(f"perdure approve exited {done.returncode}: {done.stderr.strip()}")
    console.print(f"  [green]✔[/] {escape(done.stdout.strip())}")

    console.print("[bold cyan]3[/] the app process takes the run up again and charges the refund")
    with console.status("waiting for the charge to reach the payment service…"):
        await S.wait_hold(hold.arrived.wait, app, "the charge")
    applied = services.applied[PAYMENTS]
    app.kill()
    story.killed_at = time.time()
    story.mark(f"SIGKILL app {app.pid}: charge applied, not yet recorded")
    hold.release.set()
    recorded = await perdure.history(story.run_id, url=url)
    console.print(
        f"  [green]✔[/] payment service applied the charge ({applied} charge on the ledger)"
    )
    console.print(
        f"  [bold red]☠ SIGKILL[/] app process {app.pid} before it recorded the charge; "
        f"the history ends at {escape(S.last_step(recorded, _step))}"
    )

    worker = procs.worker(AGENT_MODULE)
    story.worker_pid = worker.pid
    story.mark(f"worker {worker.pid} starts (perdure worker)")
    console.print(
        f"[bold cyan]4[/] [bold]perdure worker {AGENT_MODULE}[/] (pid {worker.pid}) "
        "recovers the run of the dead process"
    )
    with console.status("worker replays the history and finishes the run…"):
        info = await S.wait_run(url, story.run_id, worker, "the end of the run", S.ended)
    worker.terminate()
    await asyncio.to_thread(worker.wait, 30.0)
    if info.status is RunStatus.SUCCEEDED:
        result = info.result
        said = result.get("final_output") if isinstance(result, dict) else result
        console.print(f"  [green]✔[/] run succeeded: [italic]{escape(str(said))}[/]")
    else:
        console.print(f"  [red]✗[/] run {info.status.value}: {escape(json.dumps(info.error))}")
    console.print()
    return info


def _step(key: str | None) -> str:
    return f"step {key}"


def _timeline(console: Console, story: S.Story, history: list[perdure.Event]) -> None:
    S.timeline(console, story, history, title=f"Timeline of run {story.run_id} (from its history)")
    models = [
        ev for ev in history if ev.kind is EventKind.STEP_COMPLETED and "model" in (ev.name or "")
    ]
    console.print(
        f"The worker replayed the {S.replayed(story, history)} steps recorded before the kill "
        f"without running them again; {len(models)} model calls in all, none paid for twice."
    )
    console.print()
