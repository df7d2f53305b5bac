"""How runs and history events look on a terminal (rich tables, short summaries)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from perdure._records import Event, EventKind, RunInfo, RunStatus
from perdure._summary import Summary

#: Keys of a ``suspended`` event's data the engine always writes; any other key is a
#: detail of what is pending (an adapter's tool approval: tool, arguments, requested_at).
_SUSPEND_KEYS = frozenset({"waiting_for", "wake_at", "deadline", "request_id"})

STATUS_STYLE: dict[RunStatus, str] = {
    RunStatus.PENDING: "cyan",
    RunStatus.RUNNING: "cyan",
    RunStatus.SUSPENDED: "yellow",
    RunStatus.NEEDS_ATTENTION: "bold red",
    RunStatus.SUCCEEDED: "green",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "dim",
}


# -- values -------------------------------------------------------------------------------


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def fmt_clock(ts: float) -> str:
    """``HH:MM:SS.mmm`` local time."""
    return datetime.fromtimestamp(ts).astimezone().strftime("%H:%M:%S.%f")[:-3]


def span(seconds: float) -> str:
    """``42s``, ``5m``, ``3h``, ``2d`` (rounded down, at most one unit)."""
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def relative(ts: float | None, now: float | None = None) -> str:
    """``5m ago`` or ``in 5m``."""
    if ts is None:
        return "-"
    delta = (now if now is not None else time.time()) - ts
    return f"{span(delta)} ago" if delta >= 0 else f"in {span(delta)}"


def short(value: Any, limit: int = 60) -> str:
    """Compact one-line JSON of ``value``, cut at ``limit`` characters."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except ValueError:
            text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        items: dict[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        return {str(k): v for k, v in items.items()}
    return {}


def error_text(error: Mapping[str, Any] | None) -> str:
    if not error:
        return ""
    text = f"{error.get('type', 'Error')}: {error.get('message', '')}".rstrip(": ")
    if error.get("step"):
        text = f"at step {error['step']}: {text}"
    return text


def detail_text(details: Mapping[str, Any], limit: int = 60) -> str:
    """``tool=refund, arguments={...}, requested_at=5m ago`` from pending-approval data."""
    parts: list[str] = []
    for key, value in details.items():
        if key.endswith("_at") and isinstance(value, int | float) and not isinstance(value, bool):
            shown = relative(float(value))
        else:
            shown = short(value, limit)
        parts.append(f"{key}={shown}")
    return ", ".join(parts)


# -- runs ---------------------------------------------------------------------------------


def pending_details(suspended: Event | None) -> dict[str, Any]:
    """What a ``suspended`` event says is pending, beyond the engine's own keys."""
    if suspended is None:
        return {}
    data = _as_dict(suspended.data)
    return {k: v for k, v in data.items() if k not in _SUSPEND_KEYS and v is not None}


def last_suspension(events: Sequence[Event]) -> Event | None:
    for ev in reversed(events):
        if ev.kind is EventKind.SUSPENDED:
            return ev
    return None


def run_summary(
    info: RunInfo, pending: Mapping[str, Any] | None = None, now: float | None = None
) -> str:
    """What a run waits for, or why it needs attention, in one line."""
    now = now if now is not None else time.time()
    parts: list[str] = []
    status = info.status
    if status is RunStatus.SUSPENDED:
        if info.waiting_for is not None:
            text = f"waits for {info.waiting_for}"
            if info.request_id is not None:
                text += f" request {info.request_id}"
            if pending:
                text += f" ({detail_text(pending)})"
            if info.wake_at is not None and info.wake_at <= now:
                text += "; due now, resumes when a worker picks it up"
            elif info.wake_at is not None:
                text += f"; times out {relative(info.wake_at, now)}"
            parts.append(text)
        elif info.wake_at is not None and info.wake_at > now:
            parts.append(f"sleeps until {fmt_time(info.wake_at)} ({relative(info.wake_at, now)})")
        else:
            parts.append("due now, resumes when a worker picks it up")
    elif status is RunStatus.NEEDS_ATTENTION:
        attention = info.attention or {}
        reason = attention.get("reason")
        step = attention.get("step_key")
        if reason == "unknown-outcome":
            parts.append(f"unknown outcome at step {step}")
        elif reason == "determinism":
            parts.append(f"code changed under the run at step {step}")
        else:
            parts.append(f"{reason or 'needs attention'}: {attention.get('message', '')}")
    elif status is RunStatus.FAILED:
        parts.append(error_text(info.error))
    elif status in (RunStatus.RUNNING, RunStatus.PENDING) and info.details.get("stranded"):
        # The backend's word on why no worker drives it (DBOS: its executor died, or no
        # live worker runs its application version).
        parts.append(str(info.details["stranded"]))
    elif status in (RunStatus.RUNNING, RunStatus.PENDING) and info.owner:
        parts.append(f"driven by {info.owner}")
    if info.cancel_requested and not status.terminal:
        parts.append("cancel requested")
    return "; ".join(p for p in parts if p)


def status_text(status: RunStatus) -> Text:
    return Text(status.value, style=STATUS_STYLE.get(status, ""))


def runs_table(
    runs: Sequence[RunInfo], pending: Mapping[str, Mapping[str, Any]], now: float | None = None
) -> Table:
    now = now if now is not None else time.time()
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("RUN", no_wrap=True)
    table.add_column("WORKFLOW", overflow="fold", min_width=12)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("AGE", no_wrap=True, justify="right")
    table.add_column("WAITING", no_wrap=True)
    table.add_column("DETAILS", overflow="fold", min_width=24, ratio=1)
    table.add_column("VERSION", overflow="fold")
    for info in runs:
        table.add_row(
            Text(info.run_id),
            Text(info.workflow),
            status_text(info.status),
            age_text(info, now),
            Text(waiting_text(info)),
            Text(run_summary(info, pending.get(info.run_id), now)),
            Text(info.code_version or "-"),
        )
    return table


def age_text(info: RunInfo, now: float) -> Text:
    """How long since the run last changed: for a waiting run, how long it has waited."""
    waiting = info.status in (RunStatus.SUSPENDED, RunStatus.NEEDS_ATTENTION)
    style = "bold red" if info.status is RunStatus.NEEDS_ATTENTION else "yellow" if waiting else ""
    return Text(span(now - info.updated_at), style=style)


def waiting_text(info: RunInfo) -> str:
    """What the run waits for: a signal, a timer, or someone (needs-attention)."""
    if info.status is RunStatus.NEEDS_ATTENTION:
        return "operator"
    if info.status is RunStatus.SUSPENDED:
        return info.waiting_for or ("timer" if info.wake_at is not None else "worker")
    return "-"


def stats_table(summary: Summary, now: float) -> Table:
    """The console's summary bar as a grid."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for status, n in summary.counts.items():
        grid.add_row(status.value, Text(str(n), style=STATUS_STYLE.get(status, "") if n else "dim"))
    grid.add_row(
        "total", str(summary.total) + (" (the newest; more exist)" if summary.truncated else "")
    )
    oldest = summary.oldest_waiting
    if oldest is None:
        grid.add_row("oldest waiting", Text("none", style="dim"))
    else:
        grid.add_row(
            "oldest waiting",
            Text(
                f"{oldest.run_id} ({oldest.status.value}, {waiting_text(oldest)}) "
                f"for {span(summary.oldest_age)}"
            ),
        )
    for signal, n in summary.waiting_by_signal.items():
        grid.add_row(f"waiting for {signal}", str(n))
    return grid


def run_fields(info: RunInfo, pending: Mapping[str, Any] | None = None) -> Table:
    """The run's own fields as a two-column grid."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def row(name: str, value: str | Text) -> None:
        grid.add_row(name, value if isinstance(value, Text) else Text(value))

    row("run", info.run_id)
    row("workflow", info.workflow)
    row("status", status_text(info.status))
    summary = run_summary(info, pending)
    if summary:
        row("", summary)
    row("code version", info.code_version or "-")
    row("created", f"{fmt_time(info.created_at)} ({relative(info.created_at)})")
    row("updated", f"{fmt_time(info.updated_at)} ({relative(info.updated_at)})")
    if info.parent_run_id:
        row("parent run", info.parent_run_id)
    if info.owner:
        row("owner", f"{info.owner} (lease until {fmt_time(info.lease_until)})")
    if info.waiting_for is not None:
        row("waiting for", info.waiting_for)
    if info.request_id is not None:
        row("request", f"{info.request_id} (perdure approve/reject --request {info.request_id})")
    if pending:
        for key, value in pending.items():
            row(f"  {key}", detail_text({key: value}, 200).partition("=")[2])
    if info.wake_at is not None:
        row("wake at", f"{fmt_time(info.wake_at)} ({relative(info.wake_at)})")
    if info.attention:
        for key, value in info.attention.items():
            row(f"attention.{key}", short(value, 200))
    if info.cancel_requested:
        row("cancel requested", "yes")
    row("input", short(info.input, 200))
    if info.status is RunStatus.SUCCEEDED:
        row("result", short(info.result, 200))
    if info.error:
        row("error", error_text(info.error))
    return grid


# -- history ------------------------------------------------------------------------------


def event_summary(ev: Event) -> tuple[str, str, str]:
    """``(summary, attempt, duration)`` of one history event."""
    data = _as_dict(ev.data)
    attempt = data.get("attempt", data.get("attempts"))
    attempt_s = "" if attempt is None else str(attempt)
    duration = data.get("duration")
    duration_s = f"{duration:.3f}s" if isinstance(duration, int | float) else ""
    kind = ev.kind
    if kind is EventKind.RUN_STARTED:
        summary = f"input {short(ev.data)}"
    elif kind is EventKind.STEP_COMPLETED:
        summary = f"result {short(data.get('result'))}"
        if data.get("kind"):
            summary = f"{data['kind']}: {summary}"
    elif kind is EventKind.STEP_FAILED:
        summary = f"failed permanently: {error_text(_as_dict(data.get('error')))}"
    elif kind is EventKind.ATTEMPT_FAILED:
        summary = f"attempt failed: {error_text(_as_dict(data.get('error')))}"
        if data.get("retry_in") is not None:
            summary += f"; retry in {data['retry_in']:g}s"
    elif kind is EventKind.INTENT:
        summary = "intent recorded before calling the effect"
    elif kind is EventKind.SIGNAL_RECEIVED:
        if data.get("timed_out"):
            summary = f"{ev.name}: timed out after {data.get('timeout')}s"
        else:
            summary = (
                f"{ev.name} = {short(data.get('payload'))}, "
                f"sent by {data.get('sent_by') or '?'} at {fmt_time(data.get('sent_at'))}"
            )
            if data.get("request_id") is not None:
                summary += f" for request {data['request_id']}"
            if isinstance(data.get("waited"), int | float):
                summary += f" (waited {span(data['waited'])})"
    elif kind is EventKind.TIMER_STARTED:
        summary = f"sleep {data.get('seconds')}s, until {fmt_time(data.get('wake_at'))}"
    elif kind is EventKind.MARKER:
        summary = f"patch marker {ev.name}"
    elif kind is EventKind.SUSPENDED:
        if data.get("waiting_for") is not None:
            summary = f"waits for {data['waiting_for']}"
            if data.get("request_id") is not None:
                summary += f" request {data['request_id']}"
            if data.get("deadline") is not None:
                summary += f" until {fmt_time(data['deadline'])}"
        else:
            summary = f"sleeps until {fmt_time(data.get('wake_at'))}"
        pending = pending_details(ev)
        if pending:
            summary += f" ({detail_text(pending)})"
    elif kind is EventKind.NEEDS_ATTENTION:
        summary = f"{data.get('reason')}: {data.get('message', '')}"
    elif kind is EventKind.RECONCILED:
        summary = f"{data.get('outcome')}"
        if data.get("by"):
            summary += f" by {data['by']}"
        if data.get("outcome") == "succeeded":
            summary += f", result {short(data.get('result'))}"
        if data.get("message"):
            summary += f": {data['message']}"
    elif kind is EventKind.CANCEL_REQUESTED:
        summary = "cancel requested" + (f" by {data['by']}" if data.get("by") else "")
    elif kind is EventKind.RUN_SUCCEEDED:
        summary = f"result {short(data.get('result'))}"
    elif kind is EventKind.RUN_FAILED:
        summary = error_text(data)
    elif kind is EventKind.RUN_CANCELLED:
        compensated: Any = data.get("compensated")
        summary = f"compensated {short(compensated)}" if compensated else "cancelled"
    else:
        summary = short(ev.data) if ev.data is not None else ""
    return summary, attempt_s, duration_s


def history_table(events: Sequence[Event]) -> Table:
    days = {datetime.fromtimestamp(ev.at).astimezone().date() for ev in events}
    title = f"history ({len(events)} events"
    if len(days) == 1:  # one day: the table shows times, the title the date
        title += f", {next(iter(days)).isoformat()}"
    table = Table(
        box=None,
        header_style="bold",
        pad_edge=False,
        title=title + ")",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("SEQ", justify="right", no_wrap=True)
    table.add_column("TIME", no_wrap=True)
    table.add_column("KIND", no_wrap=True)
    table.add_column("STEP", overflow="fold", max_width=28)
    table.add_column("DETAILS", overflow="fold", min_width=30, ratio=1)
    table.add_column("ATTEMPT", justify="right", no_wrap=True)
    table.add_column("DURATION", justify="right", no_wrap=True)
    for ev in events:
        summary, attempt, duration = event_summary(ev)
        style = (
            "red"
            if ev.kind in (EventKind.STEP_FAILED, EventKind.RUN_FAILED, EventKind.NEEDS_ATTENTION)
            else ""
        )
        table.add_row(
            str(ev.seq),
            fmt_clock(ev.at) if len(days) == 1 else fmt_time(ev.at),
            Text(ev.kind.value, style=style),
            Text(ev.step_key or ""),
            Text(summary),
            attempt,
            duration,
        )
    return table
