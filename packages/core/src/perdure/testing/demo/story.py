"""The demo's bookkeeping, shared by the adapters' stories: what the demo did and saw, how it
waits for the run's next stop, and how it prints the history and the ledger verdict.

An adapter's ``demo`` module tells its own story (which processes, which calls) and uses
these for everything that does not depend on the framework.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import perdure
from perdure._errors import RunNotFoundError
from perdure._records import POSITIONAL_KINDS, Event, EventKind, RunInfo, RunStatus
from perdure.testing.demo.services import (
    APPROVAL_THRESHOLD_CENTS,
    EMAIL,
    ORDERS,
    PAYMENTS,
    DemoServices,
    dollars,
    fields,
)
from perdure.testing.processes import Process

ORDER_ID = "42"
OPERATOR = "demo-operator"
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


def console() -> Console:
    """A console 110 columns wide when the output is not a terminal (and COLUMNS unset)."""
    out = Console(highlight=False)
    if not out.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        out = Console(highlight=False, width=110)
    return out


def stopped(info: RunInfo) -> bool:
    """The run is neither pending nor running (it suspended or ended)."""
    return info.status not in (RunStatus.PENDING, RunStatus.RUNNING)


def ended(info: RunInfo) -> bool:
    """The run ended, or needs a human to reconcile it."""
    return info.status.terminal or info.status is RunStatus.NEEDS_ATTENTION


async def wait_run(
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


async def wait_hold(arrived: Callable[[float], bool], proc: Process, what: str) -> None:
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


def pending(info: RunInfo) -> str:
    """What a run suspended for approval waits for, from its attention details."""
    details: dict[str, Any] = info.attention or {}
    tool = details.get("tool") or details.get("name") or "a tool call"
    args = details.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    amount = fields(args).get("amount_cents")
    text = f"{tool}({json.dumps(args)}) needs approval" if args is not None else f"{tool}"
    if isinstance(amount, int):
        text += f": {dollars(amount)} > {dollars(APPROVAL_THRESHOLD_CENTS)}"
    return text


# -- the report -------------------------------------------------------------------------------


def describe(ev: Event) -> str:
    """One line for a history event."""
    data = fields(ev.data)
    name = ev.name or ""
    if ev.kind is EventKind.RUN_STARTED:
        return "run started"
    if ev.kind is EventKind.STEP_COMPLETED:
        attempt = data.get("attempt", 1)
        took = data.get("duration")
        extra = f"attempt {attempt}" + (f", {float(took) * 1000:.0f} ms" if took else "")
        return f"{_result(data.get('result'))} ({extra})"
    if ev.kind is EventKind.ATTEMPT_FAILED:
        err = fields(data.get("error"))
        return f"attempt {data.get('attempt')} failed: {err.get('message')}; retry"
    if ev.kind is EventKind.INTENT:
        return f"intent recorded before calling {name} (its receiver does not dedupe)"
    if ev.kind is EventKind.SUSPENDED:
        tool = fields(data.get("details")).get("tool")
        waits = data.get("waiting_for") or "a timer"
        return f"suspended, waiting for {waits}" + (f" of {tool}" if tool else "")
    if ev.kind is EventKind.SIGNAL_RECEIVED:
        verdict = "approved" if fields(data.get("payload")).get("approved") else "decided"
        waited = float(data.get("waited") or 0.0)
        return f"{verdict} by {data.get('sent_by')} after {waited:.2f}s waiting"
    if ev.kind is EventKind.RUN_SUCCEEDED:
        return "run succeeded"
    if ev.kind in (EventKind.RUN_FAILED, EventKind.NEEDS_ATTENTION):
        return f"{ev.kind.value}: {json.dumps(data)[:80]}"
    return ev.kind.value


def _result(result: Any) -> str:
    """A step's recorded result, short: a model's decision or a tool's answer."""
    raw: Any = result
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return raw if len(raw) <= 60 else f"{raw[:59]}…"
    value = fields(raw)
    if isinstance(value.get("response"), dict):
        value = fields(value["response"])  # an adapter's record of a model call
    output: Any = value.get("output")
    if isinstance(output, list):
        said: list[str] = []
        for item in map(fields, cast(list[Any], output)):
            if item.get("type") == "function_call":
                said.append(f"model → call {item.get('name')}")
            elif item.get("type") == "message":
                said.append("model → final answer")
        if said:
            return ", ".join(said)
    if "charge_id" in value:
        if value.get("duplicate"):
            return f"charge {value['charge_id']}, key seen before: nothing charged again"
        return f"charge {value['charge_id']}"
    if "amount_cents" in value:
        return f"order {value.get('order_id')}: {dollars(int(value['amount_cents']))}"
    if "message_id" in value:
        return f"email {value['message_id']} sent"
    text = json.dumps(raw)
    return text if len(text) <= 60 else f"{text[:59]}…"


def last_step(history: list[Event], label: Callable[[str | None], str]) -> str:
    """Where the history ends: the ``label`` of its last positional step."""
    steps = [ev for ev in history if ev.kind in POSITIONAL_KINDS]
    return label(steps[-1].step_key) if steps else "the start"


def replayed(story: Story, history: list[Event]) -> int:
    """How many positional steps were recorded before the kill."""
    killed = story.killed_at or float("inf")
    return sum(1 for ev in history if ev.kind in POSITIONAL_KINDS and ev.at < killed)


def timeline(
    out: Console,
    story: Story,
    history: list[Event],
    *,
    title: str,
    label: Callable[[str | None], str] = lambda key: key or "",
) -> None:
    """The run's history and the demo's marks as one table, in time order."""
    rows: list[tuple[float, str, str, str]] = []
    killed = story.killed_at or float("inf")
    for ev in history:
        who = f"app {story.app_pid}" if ev.at < killed else f"worker {story.worker_pid}"
        rows.append((ev.at, who, escape(label(ev.step_key)), escape(describe(ev))))
    for mark in story.marks:
        rows.append((mark.at, "[bold]demo[/]", "", f"[bold magenta]{escape(mark.text)}[/]"))
    rows.sort(key=lambda row: row[0])
    start = rows[0][0] if rows else 0.0
    table = Table(title=title, title_justify="left")
    table.add_column("t", justify="right", style="dim")
    table.add_column("by")
    table.add_column("step")
    table.add_column("what")
    for at, who, key, text in rows:
        table.add_row(f"{at - start:6.2f}s", who, key, text)
    out.print(table)


def verdict(out: Console, services: DemoServices, info: RunInfo) -> int:
    """Print the payment ledger; 0 when every order was charged once and the run succeeded."""
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
    out.print(ledger)
    charges = services.charges_per_order(PAYMENTS)
    for order_id in sorted(set(charges) | {ORDER_ID}):
        amount = int(ORDERS.get(order_id, {}).get("amount_cents", 0))
        out.print(f"order {order_id}: {charges[order_id]} charge(s) of {dollars(amount)}")
    out.print(
        f"mail relay (no dedup): {services.requests[EMAIL]} request(s), "
        f"{services.applied[EMAIL]} email(s) sent"
    )
    once = all(count == 1 for count in charges.values()) and charges[ORDER_ID] == 1
    ok = once and info.status is RunStatus.SUCCEEDED
    if ok:
        out.print("[bold green]✔ every order charged exactly once, despite the SIGKILL[/]")
        return 0
    out.print(
        f"[bold red]✗ expected one charge per order and a succeeded run; got "
        f"{dict(charges)} and {info.status.value}[/]"
    )
    return 1
