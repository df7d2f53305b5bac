"""perdure's reads of DBOS's system tables: plain SQL and perdure's own decoder.

DBOS decodes each row by the format its ``serialization`` column names, and for
``py_pickle`` that is ``pickle.loads``: a row planted in the database would run code in
whoever reads it. So nothing perdure reads of a run (status, input, result, error, step
outputs) goes through DBOS's read API; it is selected here, its ``serialization`` is
checked first, and a row in any other format is refused unread with
``ForeignRowError`` naming the run and the row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from perdure.spi import CorruptHistoryError
from perdure_dbos._serializer import CorruptValueError, ForeignRowError, JsonSerializer

#: The formats perdure decodes (with its own decoder, which never imports or executes):
#: its own, DBOS's portable JSON, and rows from before DBOS recorded a format (DBOS reads
#: those with the configured serializer, which is perdure's).
DECODED: frozenset[str | None] = frozenset({None, "perdure_json", "portable_json"})

_SERIALIZER = JsonSerializer()

#: The name of the one DBOS workflow perdure registers: every run is one of its executions.
WORKFLOW_NAME = "perdure_run"


def seconds(ms: Any) -> float:
    """A DBOS epoch-milliseconds column as epoch seconds (0 where it is empty)."""
    return float(ms) / 1000.0 if ms is not None else 0.0


@contextmanager
def connected(engine: sa.Engine, conn: sa.Connection | None) -> Iterator[sa.Connection]:
    """``conn`` if the caller holds one (several reads, one connection), else a new one."""
    if conn is not None:
        yield conn
        return
    with engine.connect() as fresh:
        yield fresh


@dataclass(frozen=True, slots=True)
class StatusRow:
    """One ``workflow_status`` row as stored (values still text)."""

    run_id: str
    status: str | None
    name: str | None
    executor_id: str | None
    app_version: str | None
    created_ms: Any
    updated_ms: Any
    serialization: str | None
    inputs: str | None
    output: str | None
    error: str | None
    #: The DBOS queue it is (or was) enqueued on.
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class StepRow:
    """One ``operation_outputs`` row of a run (values still text)."""

    function_id: int
    function_name: str
    output: str | None
    error: str | None
    serialization: str | None
    started_ms: Any
    completed_ms: Any


def check_format(run_id: str, table: str, row: int | None, serialization: Any) -> None:
    """Refuse a row in a format perdure does not decode, before anything reads it."""
    if serialization not in DECODED:
        raise ForeignRowError(run_id, table, row, str(serialization))


def decode(run_id: str, table: str, row: int | None, serialization: Any, text: str | None) -> Any:
    """A stored value, decoded by perdure; ``CorruptHistoryError`` names the run and row."""
    check_format(run_id, table, row, serialization)
    if text is None:
        return None
    try:
        if serialization == "portable_json":
            return json.loads(text)
        return _SERIALIZER.deserialize(text)
    except (CorruptValueError, ValueError) as exc:
        where = f"{table} row" + (f" #{row}" if row is not None else "")
        raise CorruptHistoryError(run_id, row, f"{where}: {exc}") from None


def _status_query(t: Any, marks: sa.Table | None = None) -> Any:
    """The ``StatusRow`` columns, then (with ``marks``) perdure's run row's, joined."""
    ws, wi, wo = t.workflow_status, t.workflow_input, t.workflow_output
    joined = ws.outerjoin(wi, wi.c.workflow_uuid == ws.c.workflow_uuid).outerjoin(
        wo, wo.c.workflow_uuid == ws.c.workflow_uuid
    )
    if marks is not None:
        joined = joined.outerjoin(marks, marks.c.run_id == ws.c.workflow_uuid)
    return sa.select(
        ws.c.workflow_uuid,
        ws.c.status,
        ws.c.name,
        ws.c.executor_id,
        ws.c.application_version,
        ws.c.created_at,
        ws.c.updated_at,
        ws.c.serialization,
        sa.func.coalesce(wi.c.inputs, ws.c.inputs),
        sa.func.coalesce(wo.c.output, ws.c.output),
        sa.func.coalesce(wo.c.error, ws.c.error),
        ws.c.queue_name,
        *(() if marks is None else marks.c),
    ).select_from(joined)


def status_rows(
    engine: sa.Engine,
    t: Any,
    name: str,
    *,
    run_ids: Sequence[str] | None = None,
    statuses: Sequence[str] | None = None,
    where: Sequence[Any] = (),
    limit: int | None = None,
    offset: int = 0,
) -> list[StatusRow]:
    """``workflow_status`` rows of the DBOS workflow ``name``, newest first, filtered in SQL
    (``where``: further conditions, e.g. ``listing_filter``'s)."""
    found = status_and_marks(
        engine,
        t,
        name,
        None,
        run_ids=run_ids,
        statuses=statuses,
        where=where,
        limit=limit,
        offset=offset,
    )
    return [st for st, _ in found]


def status_and_marks(
    engine: sa.Engine,
    t: Any,
    name: str,
    marks: sa.Table | None,
    *,
    run_ids: Sequence[str] | None = None,
    statuses: Sequence[str] | None = None,
    where: Sequence[Any] = (),
    limit: int | None = None,
    offset: int = 0,
    conn: sa.Connection | None = None,
) -> list[tuple[StatusRow, dict[str, Any] | None]]:
    """``status_rows``, each with perdure's run row of it in ``marks`` (its columns by
    name; None without one), read in one statement (on ``conn`` if given)."""
    ws = t.workflow_status
    query = _status_query(t, marks).where(ws.c.name == name, *where)
    if run_ids is not None:
        query = query.where(ws.c.workflow_uuid.in_(list(run_ids)))
    if statuses is not None:
        query = query.where(ws.c.status.in_(list(statuses)))
    query = query.order_by(ws.c.created_at.desc(), ws.c.workflow_uuid.desc())
    if limit is not None:
        query = query.limit(limit).offset(offset)
    with connected(engine, conn) as c:
        rows = c.execute(query).all()
    keys = [] if marks is None else [c.name for c in marks.c]
    return [(StatusRow(*(row[i] for i in range(12))), _joined(keys, row[12:])) for row in rows]


def _joined(keys: Sequence[str], values: Sequence[Any]) -> dict[str, Any] | None:
    """The joined run row by column name, or None where the outer join found none."""
    if not keys or values[0] is None:
        return None
    return dict(zip(keys, values, strict=True))


def step_rows(
    engine: sa.Engine, t: Any, run_id: str, conn: sa.Connection | None = None
) -> list[StepRow]:
    """Every ``operation_outputs`` row of ``run_id``, in DBOS's order (its function id),
    read on ``conn`` if given."""
    oo = t.operation_outputs
    query = (
        sa.select(
            oo.c.function_id,
            oo.c.function_name,
            oo.c.output,
            oo.c.error,
            oo.c.serialization,
            oo.c.started_at_epoch_ms,
            oo.c.completed_at_epoch_ms,
        )
        .where(oo.c.workflow_uuid == run_id)
        .order_by(oo.c.function_id)
    )
    with connected(engine, conn) as c:
        rows = c.execute(query).all()
    return [StepRow(int(r[0]), str(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]


def recorded_at(engine: sa.Engine, t: Any, run_id: str, function_id: int) -> bool:
    """Whether DBOS recorded the operation ``function_id`` of ``run_id``."""
    oo = t.operation_outputs
    query = (
        sa.select(oo.c.function_id)
        .where(oo.c.workflow_uuid == run_id, oo.c.function_id == function_id)
        .limit(1)
    )
    with engine.connect() as conn:
        return conn.execute(query).first() is not None


def pending_executors(engine: sa.Engine, t: Any, name: str, version: str) -> set[str]:
    """The executors holding PENDING workflows ``name`` of application version ``version``."""
    ws = t.workflow_status
    query = (
        sa.select(ws.c.executor_id)
        .where(ws.c.status == "PENDING", ws.c.name == name, ws.c.application_version == version)
        .distinct()
    )
    with engine.connect() as conn:
        return {str(r[0]) for r in conn.execute(query) if r[0] is not None}


def pending_of(
    engine: sa.Engine, t: Any, name: str, version: str, executors: Sequence[str]
) -> list[tuple[str, str | None]]:
    """(run id, serialization) of the PENDING workflows ``name`` of ``version`` that the
    ``executors`` hold, oldest first."""
    ws = t.workflow_status
    query = (
        sa.select(ws.c.workflow_uuid, ws.c.serialization)
        .where(
            ws.c.status == "PENDING",
            ws.c.name == name,
            ws.c.application_version == version,
            ws.c.executor_id.in_(list(executors)),
        )
        .order_by(ws.c.created_at, ws.c.workflow_uuid)
    )
    with engine.connect() as conn:
        return [(str(r[0]), r[1]) for r in conn.execute(query)]


#: The DBOS statuses that show, whatever perdure's own row says, as these perdure ones.
_BY_DBOS_STATUS: dict[str, tuple[str, ...]] = {
    "SUCCESS": ("succeeded", "cancelled"),
    "ERROR": ("failed",),
    "CANCELLED": ("cancelled",),
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": ("needs-attention",),
    "ENQUEUED": ("pending",),
}


def listing_filter(
    t: Any,
    marks: sa.Table,
    *,
    statuses: Sequence[str] | None,
    workflow: str | None,
    updated_before: float | None,
) -> list[Any]:
    """SQL conditions that keep every run ``list_runs`` would show for these arguments
    (perdure statuses, workflow name, last change before a time) and drop almost all
    others; the caller's exact test runs on what is left."""
    ws = t.workflow_status
    # Its own alias: the listing joins ``marks`` too, which would correlate these away.
    m = marks.alias("listed_mark")
    owned = sa.select(m.c.run_id).where(m.c.run_id == ws.c.workflow_uuid)
    mark = sa.select(m.c.status).where(m.c.run_id == ws.c.workflow_uuid)
    out: list[Any] = []
    if workflow is not None:
        named = owned.where(m.c.workflow == workflow)
        out.append(sa.or_(named.exists(), ~owned.exists()))
    if statuses is not None:
        wanted = set(statuses)
        either = [
            mark.where(m.c.status.in_(sorted(wanted))).exists(),
            ~owned.exists(),
            # A row perdure will not decode is listed as needing attention.
            ws.c.serialization.notin_(sorted(s for s in DECODED if s is not None)),
        ]
        dbos = [k for k, shown in _BY_DBOS_STATUS.items() if wanted & set(shown)]
        if dbos:
            either.append(ws.c.status.in_(dbos))
        out.append(sa.or_(*either))
    if updated_before is not None:
        late = owned.where(m.c.updated_at > updated_before)
        out.append(ws.c.updated_at <= int(updated_before * 1000))
        out.append(~late.exists())
    return out
