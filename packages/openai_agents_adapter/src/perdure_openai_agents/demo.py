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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import perdure
from perdure.errors import RunNotFoundError
from perdure.records import POSITIONAL_KINDS, Event, EventKind, RunInfo, RunStatus
from perdure.testing.processes import Process, Processes
from perdure_openai_agents.demo_services import (
    APPROVAL_THRESHOLD_CENTS,
    EMAIL,
    ORDERS,
    PAYMENTS,
    SERVICES_ENV,
    DemoServices,
    dollars,
)

ORDER_ID = "42"
PROMPT = f"Refund order {ORDER_ID}: the espresso machine arrived cracked."
OPERATOR = "demo-operator"
AGENT_MODULE = "perdure_openai_agents.demo_agent"
#: How often the demo looks at the run's status while it waits for the next stop.
POLL_SECONDS = 0.05
#: No single part of the story should take longer than this, even on a slow machine.
PART_TIMEOUT = 180.0


class DemoError(Exception):
    """The story went off script; the message says where."""


@dataclass
class Mark:
    """Something the demo itself did, placed on the timeline next to the run's events."""

    at: float
    text: str


@dataclass
class Story:
    """What the demo saw happen, for the timeline and the verdict."""

    run_id: str
    marks: list[Mark] = field(default_factory=lambda: [])
    killed_at: float | None = None
    app_pid: int | None = None
    worker_pid: int | None = None

    def mark(self, text: str) -> None:
        self.marks.append(Mark(time.time(), text))


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console = Console(highlight=False, width=110)
    return console


def main(url: str | None = None) -> int:
    """Run the demo on ``url`` (default: a new SQLite file in a temp dir); 0 when every
    order was charged exactly once and the run succeeded, else 1."""
    console = _console()
    with tempfile.TemporaryDirectory(prefix="perdure-demo-") as tmp:
        target = url or f"sqlite:///{Path(tmp) / 'perdure-demo.db'}"
        try:
            return asyncio.run(_demo(console, target, Path(tmp)))
        except DemoError as exc:
            console.print(f"[bold red]✗ demo failed:[/] {escape(str(exc))}")
            return 1


async def _demo(console: Console, url: str, tmp: Path) -> int:
    real = bool(os.environ.get("OPENAI_API_KEY"))
    story = Story(f"refund-{ORDER_ID}-{secrets.token_hex(3)}")
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
        return _verdict(console, services, info)


def _intro(console: Console, url: str, services: str, run_id: str, real: bool) -> None:
    from perdure.cli.common import mask_url

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
    console: Console, procs: Processes, services: DemoServices, story: Story, url: str
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
        info = await _wait_run(url, story.run_id, app, "the approval request", _stopped)
    if info.status is not RunStatus.SUSPENDED or info.waiting_for != perdure.APPROVAL:
        why = json.dumps(info.error or info.attention)
        raise DemoError(f"expected the run to wait for approval, it is {info.status.value}: {why}")
    console.print(f"  [yellow]⏸[/] run suspended: {escape(_pending(info))}")
    console.print("    no lease, thread or connection is held for the run while it waits")

    console.print(f"[bold cyan]2[/] [bold]perdure approve {story.run_id} --by {OPERATOR}[/]")
    story.mark(f"{OPERATOR} runs perdure approve (another process)")
    with console.status("approving from another process…"):
        done = await asyncio.to_thread(
            procs.cli, "approve", story.run_id, "--by", OPERATOR, "-m", "receipt checked"
        )
    if done.returncode != 0:
        raise DemoError(f"perdure approve exited {done.returncode}: {done.stderr.strip()}")
    console.print(f"  [green]✔[/] {escape(done.stdout.strip())}")

    console.print("[bold cyan]3[/] the app process takes the run up again and charges the refund")
    with console.status("waiting for the charge to reach the payment service…"):
        await _wait_hold(hold.arrived.wait, app, "the charge")
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
        f"the history ends at {escape(_last_step(recorded))}"
    )

    worker = procs.worker(AGENT_MODULE)
    story.worker_pid = worker.pid
    story.mark(f"worker {worker.pid} starts (perdure worker)")
    console.print(
        f"[bold cyan]4[/] [bold]perdure worker {AGENT_MODULE}[/] (pid {worker.pid}) "
        "recovers the run of the dead process"
    )
    with console.status("worker replays the history and finishes the run…"):
        info = await _wait_run(url, story.run_id, worker, "the end of the run", _ended)
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


def _stopped(info: RunInfo) -> bool:
    return info.status not in (RunStatus.PENDING, RunStatus.RUNNING)


def _ended(info: RunInfo) -> bool:
    return info.status.terminal or info.status is RunStatus.NEEDS_ATTENTION


async def _wait_run(
    url: str, run_id: str, proc: Process, what: str, done: Callable[[RunInfo], bool]
) -> RunInfo:
    """Poll the run's status until ``done``; fail if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + PART_TIMEOUT
    while True:
        try:
            info: RunInfo | None = await perdure.get_run(run_id, url=url)
        except RunNotFoundError:
            info = None  # the app process has not created it yet
        if info is not None and done(info):
            return info
        await _check_alive(proc, what, deadline)
        await asyncio.sleep(POLL_SECONDS)


async def _wait_hold(arrived: Callable[[float], bool], proc: Process, what: str) -> None:
    """Wait for a request to reach the services' hold point."""
    deadline = time.monotonic() + PART_TIMEOUT
    while not await asyncio.to_thread(arrived, POLL_SECONDS * 4):
        await _check_alive(proc, what, deadline)


async def _check_alive(proc: Process, what: str, deadline: float) -> None:
    if proc.popen.poll() is not None:
        await asyncio.to_thread(proc.wait, 10.0)
        raise DemoError(f"process {proc.pid} exited before {what}:\n{proc.output()}")
    if time.monotonic() > deadline:
        raise DemoError(f"no {what} within {PART_TIMEOUT:.0f}s")


def _pending(info: RunInfo) -> str:
    """What a run suspended for approval waits for, from its attention details."""
    details: dict[str, Any] = info.attention or {}
    tool = details.get("tool") or details.get("name") or "a tool call"
    args = details.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    amount = args.get("amount_cents") if isinstance(args, dict) else None
    text = f"{tool}({json.dumps(args)}) needs approval" if args is not None else f"{tool}"
    if isinstance(amount, int):
        text += f": {dollars(amount)} > {dollars(APPROVAL_THRESHOLD_CENTS)}"
    return text


def _last_step(history: list[Event]) -> str:
    steps = [ev for ev in history if ev.kind in POSITIONAL_KINDS]
    return f"step {steps[-1].step_key}" if steps else "the start"


# -- the report -------------------------------------------------------------------------------


def _describe(ev: Event) -> str:
    """One line for a history event."""
    data: dict[str, Any] = ev.data if isinstance(ev.data, dict) else {}
    name = ev.name or ""
    if ev.kind is EventKind.RUN_STARTED:
        return "run started"
    if ev.kind is EventKind.STEP_COMPLETED:
        attempt = data.get("attempt", 1)
        took = data.get("duration")
        extra = f"attempt {attempt}" + (f", {float(took) * 1000:.0f} ms" if took else "")
        return f"{_result(data.get('result'))} ({extra})"
    if ev.kind is EventKind.ATTEMPT_FAILED:
        err = data.get("error") or {}
        return f"attempt {data.get('attempt')} failed: {err.get('message')}; retry"
    if ev.kind is EventKind.INTENT:
        return f"intent recorded before calling {name} (its receiver does not dedupe)"
    if ev.kind is EventKind.SUSPENDED:
        details = data.get("details")
        tool = details.get("tool") if isinstance(details, dict) else None
        waits = data.get("waiting_for") or "a timer"
        return f"suspended, waiting for {waits}" + (f" of {tool}" if tool else "")
    if ev.kind is EventKind.SIGNAL_RECEIVED:
        payload = data.get("payload") or {}
        verdict = "approved" if isinstance(payload, dict) and payload.get("approved") else "decided"
        waited = float(data.get("waited") or 0.0)
        return f"{verdict} by {data.get('sent_by')} after {waited:.2f}s waiting"
    if ev.kind is EventKind.RUN_SUCCEEDED:
        return "run succeeded"
    if ev.kind in (EventKind.RUN_FAILED, EventKind.NEEDS_ATTENTION):
        return f"{ev.kind.value}: {json.dumps(data)[:80]}"
    return ev.kind.value


def _result(result: Any) -> str:
    """A step's recorded result, short: a model's decision or a tool's answer."""
    value = result
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value if len(value) <= 60 else f"{value[:59]}…"
    if isinstance(value, dict) and isinstance(value.get("response"), dict):
        value = value["response"]  # the adapter's record of a model call
    if isinstance(value, dict) and isinstance(value.get("output"), list):
        said = []
        for item in value["output"]:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call":
                said.append(f"model → call {item.get('name')}")
            elif item.get("type") == "message":
                said.append("model → final answer")
        if said:
            return ", ".join(said)
    if isinstance(value, dict) and "charge_id" in value:
        if value.get("duplicate"):
            return f"charge {value['charge_id']}, key seen before: nothing charged again"
        return f"charge {value['charge_id']}"
    if isinstance(value, dict) and "amount_cents" in value:
        return f"order {value.get('order_id')}: {dollars(int(value['amount_cents']))}"
    if isinstance(value, dict) and "message_id" in value:
        return f"email {value['message_id']} sent"
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:59]}…"


def _timeline(console: Console, story: Story, history: list[Event]) -> None:
    rows: list[tuple[float, str, str, str]] = []
    killed = story.killed_at or float("inf")
    for ev in history:
        who = f"app {story.app_pid}" if ev.at < killed else f"worker {story.worker_pid}"
        rows.append((ev.at, who, escape(ev.step_key or ""), escape(_describe(ev))))
    for mark in story.marks:
        rows.append((mark.at, "[bold]demo[/]", "", f"[bold magenta]{escape(mark.text)}[/]"))
    rows.sort(key=lambda row: row[0])
    start = rows[0][0] if rows else 0.0
    table = Table(title=f"Timeline of run {story.run_id} (from its history)", title_justify="left")
    table.add_column("t", justify="right", style="dim")
    table.add_column("by")
    table.add_column("step")
    table.add_column("what")
    for at, who, key, text in rows:
        table.add_row(f"{at - start:6.2f}s", who, key, text)
    console.print(table)
    replayed = sum(1 for ev in history if ev.kind in POSITIONAL_KINDS and ev.at < killed)
    models = [
        ev for ev in history if ev.kind is EventKind.STEP_COMPLETED and "model" in (ev.name or "")
    ]
    console.print(
        f"The worker replayed the {replayed} steps recorded before the kill without running "
        f"them again; {len(models)} model calls in all, none paid for twice."
    )
    console.print()


def _verdict(console: Console, services: DemoServices, info: RunInfo) -> int:
    ledger = Table(title="Payment ledger (kept by the payment service)", title_justify="left")
    for column in ("idempotency key", "order", "amount", "requests", "charges applied"):
        ledger.add_column(column)
    for line in services.ledger(PAYMENTS):
        ledger.add_row(
            escape(line.key),
            line.order_id,
            dollars(line.amount_cents),
            str(line.requests),
            str(line.applied),
        )
    console.print(ledger)
    charges = services.charges_per_order(PAYMENTS)
    for order_id in sorted(set(charges) | {ORDER_ID}):
        amount = int(ORDERS.get(order_id, {}).get("amount_cents", 0))
        console.print(f"order {order_id}: {charges[order_id]} charge(s) of {dollars(amount)}")
    console.print(
        f"mail relay (no dedup): {services.requests[EMAIL]} request(s), "
        f"{services.applied[EMAIL]} email(s) sent"
    )
    once = all(count == 1 for count in charges.values()) and charges[ORDER_ID] == 1
    ok = once and info.status is RunStatus.SUCCEEDED
    if ok:
        console.print("[bold green]✔ every order charged exactly once, despite the SIGKILL[/]")
        return 0
    console.print(
        f"[bold red]✗ expected one charge per order and a succeeded run; got "
        f"{dict(charges)} and {info.status.value}[/]"
    )
    return 1
