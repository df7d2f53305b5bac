"""``perdure demo --framework langgraph``: a refund graph SIGKILLed right after it charged,
which still charges exactly once.

The story, each part in its own OS process (as in the Agents SDK demo):

1. the app process invokes the durable graph; ``lookup`` runs, ``review`` calls
   ``interrupt()`` because the refund is above the threshold, so the thread suspends;
2. ``perdure approve RUN_ID --by demo-operator`` approves it from another process;
3. the app process takes the thread up again: ``review`` re-runs with the answer and
   ``charge`` calls the payment service, which applies the charge; the demo SIGKILLs the
   app process before it can record the outcome;
4. ``perdure worker perdure_langgraph.demo_graph`` recovers the thread: the graph continues
   from its last checkpoint, ``charge`` re-runs and calls the payment service again with
   the same idempotency key (which answers with the first charge), ``notify`` sends the
   email and the thread finishes.

Then it prints the thread's timeline from its history and the payment ledger. Exit code 0
when every order was charged exactly once.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import perdure
from perdure.spi import Event, RunInfo, RunStatus
from perdure.testing.demo import story as S
from perdure.testing.demo.services import (
    APPROVAL_THRESHOLD_CENTS,
    PAYMENTS,
    SERVICES_ENV,
    DemoServices,
    dollars,
)
from perdure.testing.processes import Processes
from perdure_langgraph.durable import turn_run_id

ORDER_ID = S.ORDER_ID
GRAPH_MODULE = "perdure_langgraph.demo_graph"


def main(url: str | None = None) -> int:
    """Run the demo on ``url`` (default: a new SQLite file in a temp dir); 0 when every
    order was charged exactly once and the thread succeeded, else 1."""
    console = S.console()
    with tempfile.TemporaryDirectory(prefix="perdure-demo-") as tmp:
        target = url or f"sqlite:///{Path(tmp) / 'perdure-demo.db'}"
        try:
            return asyncio.run(_demo(console, target, Path(tmp)))
        except S.DemoError as exc:
            console.print(f"[bold red]✗ demo failed:[/] {escape(str(exc))}")
            return 1


async def _demo(console: Console, url: str, tmp: Path) -> int:
    # the first turn of the thread refund-<order>-<hex>
    story = S.Story(turn_run_id(f"refund-{ORDER_ID}-{secrets.token_hex(3)}", 1))
    with DemoServices() as services:
        procs = Processes(url, env={SERVICES_ENV: services.url}, cwd=tmp)
        _intro(console, url, services.url, story.run_id)
        try:
            info = await _tell(console, procs, services, story, url)
            history = await perdure.history(story.run_id, url=url)
        finally:
            procs.close()
            await perdure.shutdown()
        _timeline(console, story, history)
        return S.verdict(console, services, info)


def _intro(console: Console, url: str, services: str, run_id: str) -> None:
    from perdure.spi import mask_url

    console.rule("[bold]perdure demo[/]: a LangGraph refund graph that survives a SIGKILL")
    grid = Table.grid(padding=(0, 2))
    grid.add_row("[dim]backend[/]", escape(mask_url(url)))
    grid.add_row("[dim]graph[/]", f"{GRAPH_MODULE}:refund_graph, lookup → review → charge → notify")
    grid.add_row(
        "[dim]services[/]",
        f"{services}: payment service (dedupes on Idempotency-Key), mail relay (does not)",
    )
    grid.add_row(
        "[dim]policy[/]",
        f"refunds above {dollars(APPROVAL_THRESHOLD_CENTS)} wait at interrupt() for approval",
    )
    grid.add_row("[dim]thread[/]", f"{run_id}: refund order {ORDER_ID}")
    console.print(grid)
    console.print()


async def _tell(
    console: Console, procs: Processes, services: DemoServices, story: S.Story, url: str
) -> RunInfo:
    """Parts 1 to 4 of the story; the thread's run as it ended."""
    hold = services.hold(PAYMENTS, "after")  # the first charge waits here once applied
    app = procs.spawn(
        "-m", GRAPH_MODULE, "--url", url, "--run-id", story.run_id, "--order", ORDER_ID
    )
    story.app_pid = app.pid
    story.mark(f"app process {app.pid} invokes the durable graph")
    console.print(
        f"[bold cyan]1[/] app process [bold]{app.pid}[/] invokes the durable graph "
        "(its first turn is run THREAD#1) and drives it"
    )
    with console.status("the graph looks the order up…"):
        info = await S.wait_run(url, story.run_id, app, "the approval request", S.stopped)
    if info.status is not RunStatus.SUSPENDED or info.waiting_for != perdure.APPROVAL:
        why = json.dumps(info.error or info.attention)
        raise S.DemoError(
            f"expected the thread to wait for approval, it is {info.status.value}: {why}"
        )
    console.print(f"  [yellow]⏸[/] interrupt() suspended the thread: {escape(S.pending(info))}")
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

    console.print(
        "[bold cyan]3[/] the app process resumes the graph with Command(resume=approval) "
        "and charges the refund"
    )
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
        f"  [bold red]☠ SIGKILL[/] app process {app.pid} inside the charge node, before it "
        f"recorded the charge; the history ends at {escape(S.last_step(recorded, _label))}"
    )

    worker = procs.worker(GRAPH_MODULE)
    story.worker_pid = worker.pid
    story.mark(f"worker {worker.pid} starts (perdure worker)")
    console.print(
        f"[bold cyan]4[/] [bold]perdure worker {GRAPH_MODULE}[/] (pid {worker.pid}) "
        "recovers the thread of the dead process from its last checkpoint"
    )
    with console.status("worker resumes the graph and finishes the thread…"):
        info = await S.wait_run(url, story.run_id, worker, "the end of the run", S.ended)
    worker.terminate()
    await asyncio.to_thread(worker.wait, 30.0)
    if info.status is RunStatus.SUCCEEDED:
        result = info.result
        said = result.get("summary") if isinstance(result, dict) else result
        console.print(f"  [green]✔[/] run succeeded: [italic]{escape(str(said))}[/]")
    else:
        console.print(f"  [red]✗[/] run {info.status.value}: {escape(json.dumps(info.error))}")
    console.print()
    return info


def _label(step_key: str | None) -> str:
    """A keyed step's place: ``~thread/node|task_id/1.1:name`` → ``node node: name``."""
    key = step_key or ""
    parts = key.split("/")
    if not key.startswith("~") or len(parts) < 3:
        return key
    if parts[1] == "interrupt":
        return f"interrupt(): {key.rsplit(':', 1)[-1]}"
    return f"{parts[1].split('|', 1)[0]} node: {key.rsplit(':', 1)[-1]}"


def _timeline(console: Console, story: S.Story, history: list[Event]) -> None:
    title = f"Timeline of thread {story.run_id} (from its history)"
    S.timeline(console, story, history, title=title, label=_label)
    console.print(
        f"The worker continued from the graph's last checkpoint; the "
        f"{S.replayed(story, history)} step(s) and decision recorded before the kill were "
        "replayed, not run again."
    )
    console.print()
