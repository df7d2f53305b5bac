"""What the console's pages show, computed from ``Backend`` reads only: the runs list
with its filters and summary bar, and a run's history as a timeline."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from perdure._backend import Backend
from perdure._cli.common import CliError, parse_duration
from perdure._cli.render import event_summary, last_suspension, pending_details, run_summary
from perdure._records import Event, EventKind, RunInfo, RunStatus
from perdure._revealed import revealed_events, revealed_run
from perdure._summary import WAITING, Summary, summarize

#: How many of the newest runs one list query reads. The summary bar counts them and
#: the filters and pages cut them, so each refresh of a page costs one list query.
WINDOW = 2000
PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class Filters:
    """The runs list's query string, checked."""

    status: RunStatus | None = None
    workflow: str = ""
    waiting_for: str = ""
    older_than: str = ""
    search: str = ""
    page: int = 1
    problems: tuple[str, ...] = ()

    @property
    def older_than_seconds(self) -> float | None:
        if not self.older_than:
            return None
        try:
            return parse_duration("older than", self.older_than)
        except CliError:
            return None

    def query(self, **changes: Any) -> str:
        """This query string with ``changes`` (for paging links)."""
        values = {
            "status": self.status.value if self.status else "",
            "workflow": self.workflow,
            "waiting_for": self.waiting_for,
            "older_than": self.older_than,
            "q": self.search,
            "page": str(self.page),
        }
        values.update({k: str(v) for k, v in changes.items()})
        if values["page"] == "1":
            del values["page"]
        return urlencode({k: v for k, v in values.items() if v})


def parse_filters(params: Mapping[str, str]) -> Filters:
    problems: list[str] = []
    status: RunStatus | None = None
    raw_status = params.get("status", "").strip()
    if raw_status:
        try:
            status = RunStatus(raw_status)
        except ValueError:
            problems.append(f"status {raw_status!r} is not one of the run statuses")
    older_than = params.get("older_than", "").strip()
    if older_than:
        try:
            parse_duration("older than", older_than)
        except CliError as exc:
            problems.append(str(exc))
    try:
        page = max(1, int(params.get("page", "1") or 1))
    except ValueError:
        page = 1
        problems.append(f"page {params.get('page')!r} is not a number")
    return Filters(
        status=status,
        workflow=params.get("workflow", "").strip(),
        waiting_for=params.get("waiting_for", "").strip(),
        older_than=older_than,
        search=params.get("q", "").strip(),
        page=page,
        problems=tuple(problems),
    )


@dataclass(frozen=True, slots=True)
class Row:
    """One run in the list."""

    info: RunInfo
    age: float  # seconds since the run last changed: how long a waiting run has waited
    summary: str

    @property
    def waiting(self) -> bool:
        return self.info.status in WAITING


@dataclass(frozen=True, slots=True)
class RunsPage:
    rows: list[Row]
    summary: Summary
    filters: Filters
    matched: int
    pages: int
    workflows: list[str]
    signals: list[str]


def _matches(info: RunInfo, f: Filters, now: float, older: float | None) -> bool:
    if f.status is not None and info.status is not f.status:
        return False
    if f.workflow and f.workflow not in info.workflow:
        return False
    if f.waiting_for and info.waiting_for != f.waiting_for:
        return False
    if older is not None and now - info.updated_at < older:
        return False
    return not (f.search and f.search.lower() not in info.run_id.lower())


def _row(info: RunInfo, now: float) -> Row:
    pending = info.attention if info.status is RunStatus.SUSPENDED else None
    return Row(info, max(0.0, now - info.updated_at), run_summary(info, pending, now))


async def runs_page(backend: Backend, filters: Filters) -> RunsPage:
    """One list query: the newest ``WINDOW`` runs, summarized, filtered and paged."""
    now = time.time()
    runs = [revealed_run(info) for info in await backend.list_runs(limit=WINDOW + 1)]
    truncated = len(runs) > WINDOW
    runs = runs[:WINDOW]
    older = filters.older_than_seconds
    matched = [info for info in runs if _matches(info, filters, now, older)]
    pages = max(1, -(-len(matched) // PAGE_SIZE))
    page = min(filters.page, pages)
    start = (page - 1) * PAGE_SIZE
    return RunsPage(
        rows=[_row(info, now) for info in matched[start : start + PAGE_SIZE]],
        summary=summarize(runs, now, truncated),
        filters=filters,
        matched=len(matched),
        pages=pages,
        workflows=sorted({info.workflow for info in runs}),
        signals=sorted({info.waiting_for for info in runs if info.waiting_for}),
    )


# -- a run --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One event of the timeline."""

    event: Event
    offset: float  # seconds since the run started
    summary: str
    attempt: str
    duration: str
    tone: str  # css class: ok, bad, wait, info


_TONES: dict[EventKind, str] = {
    EventKind.STEP_COMPLETED: "ok",
    EventKind.RUN_SUCCEEDED: "ok",
    EventKind.RECONCILED: "ok",
    EventKind.SIGNAL_RECEIVED: "signal",
    EventKind.STEP_FAILED: "bad",
    EventKind.RUN_FAILED: "bad",
    EventKind.NEEDS_ATTENTION: "bad",
    EventKind.ATTEMPT_FAILED: "warn",
    EventKind.INTENT: "warn",
    EventKind.SUSPENDED: "wait",
    EventKind.TIMER_STARTED: "wait",
}


def timeline(events: Sequence[Event]) -> list[Entry]:
    start = events[0].at if events else 0.0
    entries: list[Entry] = []
    for ev in events:
        summary, attempt, duration = event_summary(ev)
        entries.append(
            Entry(ev, ev.at - start, summary, attempt, duration, _TONES.get(ev.kind, "info"))
        )
    return entries


@dataclass(frozen=True, slots=True)
class Decision:
    """A signal the run received: who sent it and how long the run waited for it."""

    name: str
    payload: Any
    sent_by: str | None
    sent_at: float | None
    waited: float | None


def decisions(events: Sequence[Event]) -> list[Decision]:
    found: list[Decision] = []
    for ev in events:
        if ev.kind is not EventKind.SIGNAL_RECEIVED or not isinstance(ev.data, dict):
            continue
        data: dict[str, Any] = ev.data  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
        if data.get("timed_out"):
            continue
        waited = data.get("waited")
        sent_at = data.get("sent_at")
        found.append(
            Decision(
                name=ev.name or "",
                payload=data.get("payload"),
                sent_by=data.get("sent_by"),
                sent_at=float(sent_at) if isinstance(sent_at, int | float) else None,
                waited=float(waited) if isinstance(waited, int | float) else None,
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class RunView:
    info: RunInfo
    entries: list[Entry]
    pending: dict[str, Any]
    decisions: list[Decision]
    age: float
    summary: str

    @property
    def awaits_approval(self) -> bool:
        return self.info.status is RunStatus.SUSPENDED and self.info.waiting_for == "approval"

    @property
    def unknown_outcome(self) -> dict[str, Any] | None:
        attention = self.info.attention or {}
        if (
            self.info.status is RunStatus.NEEDS_ATTENTION
            and attention.get("reason") == "unknown-outcome"
        ):
            return attention
        return None

    @property
    def can_resume(self) -> bool:
        return self.info.status in WAITING and self.unknown_outcome is None

    @property
    def can_cancel(self) -> bool:
        return not self.info.status.terminal and not self.info.cancel_requested


async def run_view(backend: Backend, run_id: str) -> RunView:
    now = time.time()
    info = revealed_run(await backend.get_run(run_id))
    events = revealed_events(await backend.history(run_id))
    pending = pending_details(last_suspension(events)) if info.status is RunStatus.SUSPENDED else {}
    return RunView(
        info=info,
        entries=timeline(events),
        pending=pending,
        decisions=decisions(events),
        age=max(0.0, now - info.updated_at),
        summary=run_summary(info, pending, now),
    )
