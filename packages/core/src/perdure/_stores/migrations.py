"""The SQL schema of the embedded stores and the codecs that read and write its rows.

Each dialect has an ordered list of migrations; a store applies the ones its database
lacks when it opens and records them in ``perdure_migrations``. A migration, once
released, is never edited: a change of schema is a new migration at the end.

JSON columns hold ``perdure._serialization.dumps`` text in both dialects, so a value
reads back exactly as written. A row that cannot be decoded raises
``CorruptHistoryError`` and is left as it is.

Every step updates its run row (lease, ``updated_at``), so that row is kept small and
its changing columns unindexed: a run's input lives only in its ``run_started`` event
(SQLite rewrites a whole row on update, and a 5 MB input made each step cost ~40 ms),
and no index covers ``updated_at`` (it would be rewritten by every step, and on
PostgreSQL it would rule out HOT updates). ``list_runs`` orders by ``created_at``,
which is indexed, and filters ``updated_before`` on the way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from perdure._errors import CorruptHistoryError, SerializationError
from perdure._records import Event, EventKind, NewEvent, RunInfo, RunStatus, SignalRecord
from perdure._semantics import approvals
from perdure._serialization import dumps, loads
from perdure._store import CLAIMABLE


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: statements applied together, in one transaction."""

    version: int
    statements: tuple[str, ...]


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        (
            """CREATE TABLE runs (
                run_id TEXT PRIMARY KEY,
                workflow TEXT NOT NULL,
                status TEXT NOT NULL,
                result TEXT,
                error TEXT,
                code_version TEXT,
                owner TEXT,
                lease_until REAL,
                fence INTEGER NOT NULL DEFAULT 0,
                cancel_requested INTEGER NOT NULL DEFAULT 0,
                waiting_for TEXT,
                wake_at REAL,
                attention TEXT,
                parent_run_id TEXT,
                details TEXT,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL
            )""",
            "CREATE INDEX runs_due ON runs (status, wake_at)",
            "CREATE INDEX runs_created ON runs (created_at)",
            "CREATE INDEX runs_owner ON runs (owner) WHERE owner IS NOT NULL",
            """CREATE TABLE events (
                run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                kind TEXT NOT NULL,
                step_key TEXT,
                name TEXT,
                data TEXT,
                at REAL NOT NULL,
                PRIMARY KEY (run_id, seq)
            )""",
            """CREATE TABLE signals (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
                name TEXT NOT NULL,
                payload TEXT,
                sent_by TEXT,
                sent_at REAL NOT NULL,
                consumed INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX signals_inbox ON signals (run_id, name, consumed)",
        ),
    ),
    # The authorizer's decision on the signal (``perdure._authorization``), as JSON.
    Migration(2, ("ALTER TABLE signals ADD COLUMN decision TEXT",)),
)

# ``{s}`` stands for the quoted schema and a dot; the store substitutes it.
POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        (
            """CREATE TABLE {s}runs (
                run_id text PRIMARY KEY,
                workflow text NOT NULL,
                status text NOT NULL,
                result text,
                error text,
                code_version text,
                owner text,
                lease_until double precision,
                fence bigint NOT NULL DEFAULT 0,
                cancel_requested boolean NOT NULL DEFAULT false,
                waiting_for text,
                wake_at double precision,
                attention text,
                parent_run_id text,
                details text,
                created_at double precision NOT NULL,
                updated_at double precision NOT NULL
            ) WITH (fillfactor = 80)""",
            "CREATE INDEX runs_due ON {s}runs (status, wake_at)",
            "CREATE INDEX runs_created ON {s}runs (created_at)",
            "CREATE INDEX runs_owner ON {s}runs (owner) WHERE owner IS NOT NULL",
            # No foreign key to runs: its check would lock the run row once more per
            # event, and the fenced update that precedes every insert proves the run exists.
            """CREATE TABLE {s}events (
                run_id text NOT NULL,
                seq bigint NOT NULL,
                kind text NOT NULL,
                step_key text,
                name text,
                data text,
                at double precision NOT NULL,
                PRIMARY KEY (run_id, seq)
            )""",
            """CREATE TABLE {s}signals (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                run_id text NOT NULL REFERENCES {s}runs (run_id) ON DELETE CASCADE,
                name text NOT NULL,
                payload text,
                sent_by text,
                sent_at double precision NOT NULL,
                consumed boolean NOT NULL DEFAULT false
            )""",
            "CREATE INDEX signals_inbox ON {s}signals (run_id, name, consumed)",
        ),
    ),
    Migration(2, ("ALTER TABLE {s}signals ADD COLUMN decision text",)),
)

LATEST_VERSION = SQLITE_MIGRATIONS[-1].version
assert POSTGRES_MIGRATIONS[-1].version == LATEST_VERSION  # the dialects move together

_RUN_FIELDS = (
    "run_id", "workflow", "status", "input", "result", "error", "code_version", "owner",
    "lease_until", "fence", "cancel_requested", "waiting_for", "wake_at", "attention",
    "parent_run_id", "details", "created_at", "updated_at",
)  # fmt: skip


def run_columns(runs: str, events: str) -> str:
    """The select list of a run that ``decode_run`` reads, for ``runs`` (a table name,
    usable in RETURNING too): ``input`` is the data of the run's ``run_started`` event.
    """
    return ", ".join(
        f"(SELECT e.data FROM {events} e WHERE e.run_id = {runs}.run_id AND e.seq = 0)"
        if name == "input"
        else f"{runs}.{name}"
        for name in _RUN_FIELDS
    )


EVENT_COLUMNS = "run_id, seq, kind, step_key, name, data, at"
SIGNAL_COLUMNS = "id, run_id, name, payload, sent_by, sent_at, decision"


def _sql_list(statuses: Iterable[RunStatus]) -> str:
    return "(" + ", ".join(f"'{s.value}'" for s in statuses) + ")"


#: SQL list literal of the claimable statuses, for ``status IN (...)``.
CLAIMABLE_SQL = _sql_list(CLAIMABLE)


def encode(value: Any, where: str) -> str | None:
    """JSON text of ``value`` (``None`` stays SQL NULL), or ``SerializationError``."""
    if value is None:
        return None
    try:
        return dumps(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{where}: cannot be stored as JSON: {exc}") from exc


def encode_event(event: NewEvent, run_id: str, seq: int) -> str | None:
    """``encode`` of an event's data; the error names the run and the event."""
    if event.data is None:
        return None
    try:
        return dumps(event.data)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"run {run_id!r} event #{seq} ({event.kind.value}): cannot be stored as JSON: {exc}"
        ) from exc


def _json(text: Any, run_id: str, seq: int | None, column: str) -> Any:
    if text is None:
        return None
    if not isinstance(text, str):
        raise CorruptHistoryError(run_id, seq, f"{column} is a {type(text).__name__}, not text")
    try:
        return loads(text)
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptHistoryError(run_id, seq, f"{column} is not valid JSON: {exc}") from None


def _dict(text: Any, run_id: str, column: str) -> dict[str, Any] | None:
    value = _json(text, run_id, None, column)
    if value is None or isinstance(value, dict):
        return value  # pyright: ignore[reportUnknownVariableType]
    raise CorruptHistoryError(run_id, None, f"{column} is not a JSON object")


def status_of(value: Any, run_id: str) -> RunStatus:
    """The ``RunStatus`` stored in a runs row, or ``CorruptHistoryError``."""
    try:
        return RunStatus(value)
    except ValueError:
        raise CorruptHistoryError(run_id, None, f"unknown run status {value!r}") from None


def decode_run(row: Sequence[Any]) -> RunInfo:
    """A ``RunInfo`` from a row selected as ``run_columns``; ``CorruptHistoryError``
    naming the run and column for a value that is not what the schema holds."""
    run_id = str(row[0])
    info = RunInfo(
        run_id=run_id,
        workflow=_text(row[1], run_id, "workflow"),
        status=status_of(row[2], run_id),
        input=_json(row[3], run_id, 0, "input"),
        result=_json(row[4], run_id, None, "result"),
        error=_dict(row[5], run_id, "error"),
        code_version=row[6],
        owner=row[7],
        lease_until=_number(row[8], run_id, "lease_until", float, optional=True),
        fence=_number(row[9], run_id, "fence", int),
        cancel_requested=bool(row[10]),
        waiting_for=row[11],
        wake_at=_number(row[12], run_id, "wake_at", float, optional=True),
        attention=_dict(row[13], run_id, "attention"),
        parent_run_id=row[14],
        details=_dict(row[15], run_id, "details") or {},
        created_at=_number(row[16], run_id, "created_at", float),
        updated_at=_number(row[17], run_id, "updated_at", float),
    )
    return approvals.present(info)


def listed_run(row: Sequence[Any]) -> RunInfo:
    """``decode_run``, or for a corrupt row a run shown as needing attention with the
    reason ``corrupt``: one bad row must not hide every other run from a listing."""
    try:
        return decode_run(row)
    except CorruptHistoryError as exc:
        created = row[16] if isinstance(row[16], int | float) else 0.0
        updated = row[17] if isinstance(row[17], int | float) else created
        return RunInfo(
            run_id=str(row[0]),
            workflow=row[1] if isinstance(row[1], str) else "?",
            status=RunStatus.NEEDS_ATTENTION,
            input=None,
            created_at=float(created),
            updated_at=float(updated),
            attention={"reason": "corrupt", "message": str(exc)},
        )


def _text(value: Any, run_id: str, column: str) -> str:
    if not isinstance(value, str):
        raise CorruptHistoryError(run_id, None, f"{column} is a {type(value).__name__}, not text")
    return value


def _number(
    value: Any, run_id: str, column: str, kind: type[int] | type[float], *, optional: bool = False
) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CorruptHistoryError(run_id, None, f"{column} is {value!r}, not a number")
    if kind is int and value != int(value):
        raise CorruptHistoryError(run_id, None, f"{column} is {value!r}, not an integer")
    return kind(value)


def decode_event(row: Sequence[Any]) -> Event:
    """An ``Event`` from a row selected as ``EVENT_COLUMNS``."""
    run_id = str(row[0])
    if isinstance(row[1], bool) or not isinstance(row[1], int):
        raise CorruptHistoryError(run_id, None, f"event seq is {row[1]!r}, not an integer")
    seq = row[1]
    try:
        kind = EventKind(row[2])
    except ValueError:
        raise CorruptHistoryError(run_id, seq, f"unknown event kind {row[2]!r}") from None
    return Event(
        run_id=run_id,
        seq=seq,
        kind=kind,
        at=row[6],
        step_key=row[3],
        name=row[4],
        data=_json(row[5], run_id, seq, "data"),
    )


def decode_signal(row: Sequence[Any]) -> SignalRecord:
    """A ``SignalRecord`` from a row selected as ``SIGNAL_COLUMNS``."""
    run_id = str(row[1])
    return SignalRecord(
        signal_id=_number(row[0], run_id, "signal id", int),
        run_id=run_id,
        name=_text(row[2], run_id, f"name of signal #{row[0]}"),
        payload=_json(row[3], run_id, None, f"payload of signal #{row[0]}"),
        sent_by=row[4],
        sent_at=_number(row[5], run_id, f"sent_at of signal #{row[0]}", float),
        authorization=_dict(row[6], run_id, f"decision of signal #{row[0]}"),
    )
