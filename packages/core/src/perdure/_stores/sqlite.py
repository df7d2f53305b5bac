"""The embedded engine's default store: one SQLite file, shared by every local process.

One connection per store, used synchronously from the async methods: a local commit
costs less than a hop to a thread. Every read-modify-write runs inside
``BEGIN IMMEDIATE``, which takes the file's write lock up front, so workers and the CLI
in other processes serialize on it instead of racing; ``busy_timeout`` makes them wait
for it rather than fail. No ``await`` ever happens inside a transaction, so coroutines
sharing the connection cannot interleave within one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from perdure._errors import (
    BackendUnavailableError,
    ConfigurationError,
    LeaseLostError,
    RunNotFoundError,
)
from perdure._records import Event, EventKind, NewEvent, RunInfo, RunStatus, SignalRecord
from perdure._semantics import approvals, guards
from perdure._serialization import dumps
from perdure._store import Lease, NewRun, RunUpdate, Store
from perdure._stores.faults import sqlite_error
from perdure._stores.migrations import (
    CLAIMABLE_SQL,
    EVENT_COLUMNS,
    LATEST_VERSION,
    SIGNAL_COLUMNS,
    SQLITE_MIGRATIONS,
    decode_event,
    decode_run,
    decode_signal,
    encode,
    encode_event,
    listed_run,
    run_columns,
    status_of,
)
from perdure._urls import split_url

if TYPE_CHECKING:
    from perdure._engine.backend import EmbeddedBackend

_SYNCHRONOUS = ("full", "normal", "off")

# A run is due when it is claimable, a suspended one only once its wake time passed,
# and its lease is free, expired, or held by the owner being broken (:brk may be NULL).
_DUE = f"""status IN {CLAIMABLE_SQL}
    AND (status <> 'suspended' OR wake_at <= :now)
    AND (owner IS NULL OR COALESCE(lease_until, 0) < :now OR owner = :brk)"""
_TAKE = """UPDATE runs SET fence = fence + 1, owner = :owner, lease_until = :until,
    status = 'running', wake_at = NULL, waiting_for = NULL"""

_RUN = run_columns("runs", "events")
_SELECT_RUN = f"SELECT {_RUN} FROM runs WHERE run_id = ?"
_INSERT_RUN = """INSERT INTO runs (run_id, workflow, status, code_version, owner,
    lease_until, fence, parent_run_id, details, created_at, updated_at)
    VALUES (?, ?, 'running', ?, ?, ?, 1, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"""
_INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
_EXTEND = """UPDATE runs SET lease_until = ?, updated_at = ?
    WHERE run_id = ? AND fence = ? AND owner = ? RETURNING cancel_requested"""
_FINISH = """UPDATE runs SET status = ?, result = ?, error = ?, waiting_for = ?, wake_at = ?,
    attention = ?, owner = NULL, lease_until = NULL, updated_at = ?
    WHERE run_id = ? AND fence = ? AND owner = ? RETURNING cancel_requested"""
_CONSUME = "UPDATE signals SET consumed = 1 WHERE id = ?"
_WAKE_IF_SIGNALLED = """UPDATE runs SET wake_at = ? WHERE run_id = ? AND EXISTS (
    SELECT 1 FROM signals WHERE run_id = ? AND name = ? AND consumed = 0)"""
_NEXT_SEQ = "SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE run_id = ?"
_ACQUIRE = f"{_TAKE} WHERE run_id = :run_id AND {_DUE} RETURNING fence, cancel_requested"
_CLAIM = f"""{_TAKE} WHERE run_id IN (
    SELECT run_id FROM runs
    WHERE workflow IN (SELECT value FROM json_each(:workflows)) AND {_DUE}
    ORDER BY updated_at, run_id LIMIT :limit)
    RETURNING run_id, fence, cancel_requested, updated_at"""


def parse_sqlite_url(url: str) -> tuple[str, str]:
    """The file path and ``synchronous`` level a ``sqlite:///`` URL names.

    ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db``, as in SQLAlchemy;
    the only option is ``?synchronous=full|normal|off`` (default ``normal``).
    """
    parts = split_url(url)
    if parts.scheme != "sqlite":
        raise ConfigurationError(f"{url!r} is not a sqlite:/// URL")
    if parts.netloc:
        raise ConfigurationError(
            f"{url!r}: a SQLite URL names no host; write sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    path = unquote(parts.path)[1:]
    if not path or path.endswith("/"):
        raise ConfigurationError(f"{url!r} names no database file")
    if path == ":memory:":
        raise ConfigurationError(
            f"{url!r}: an in-memory SQLite database survives nothing; name a file"
        )
    if path.startswith("file:"):
        raise ConfigurationError(f"{url!r}: SQLite file: URIs are not supported; name a path")
    if parts.fragment:
        raise ConfigurationError(f"{url!r}: unexpected fragment #{parts.fragment}")
    synchronous = "normal"
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key != "synchronous":
            raise ConfigurationError(f"{url!r}: unknown option {key!r} (known: synchronous)")
        if value.lower() not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"{url!r}: synchronous={value!r}; use one of {', '.join(_SYNCHRONOUS)}"
            )
        synchronous = value.lower()
    return path, synchronous


def connect(
    path: str, synchronous: str, setup: Callable[[sqlite3.Connection], None] | None = None
) -> sqlite3.Connection:
    """An autocommit connection to the SQLite file ``path`` as every perdure process
    opens it: WAL, the given ``synchronous`` level, waiting up to 10 s for the write
    lock; then ``setup`` (tables, pragmas of the caller's own). Usable from any thread
    (each caller keeps it on one event loop). Errors are typed; nothing is left open."""
    try:
        db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise sqlite_error(exc, path) from exc
    try:
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous}")
        if setup is not None:
            setup(db)
    except sqlite3.Error as exc:
        db.close()
        raise sqlite_error(exc, path) from exc
    return db


@contextmanager
def immediate(db: sqlite3.Connection) -> Generator[sqlite3.Connection, None, None]:
    """One ``BEGIN IMMEDIATE`` transaction: committed if the body returns, else rolled
    back. Its body must not ``await``: coroutines share the connection."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class SqliteStore(Store):
    """Runs, histories and inboxes in one SQLite file (WAL mode)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.path, self.synchronous = parse_sqlite_url(url)
        self._db: sqlite3.Connection | None = None

    # ------------------------------------------------------------ connection

    async def open(self) -> None:
        if self._db is not None:
            return
        self._db = connect(self.path, self.synchronous, self._prepare)

    def _prepare(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA foreign_keys = ON")
        self._migrate(db)

    def _migrate(self, db: sqlite3.Connection) -> None:
        if self._version(db) >= LATEST_VERSION:
            return  # the common case takes no write lock
        with immediate(db):
            db.execute(
                "CREATE TABLE IF NOT EXISTS perdure_migrations ("
                "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            done = self._version(db)  # again, under the lock: another process may have won
            for migration in SQLITE_MIGRATIONS:
                if migration.version > done:
                    for statement in migration.statements:
                        db.execute(statement)
                    db.execute(
                        "INSERT INTO perdure_migrations (version, applied_at) VALUES (?, ?)",
                        (migration.version, time.time()),
                    )

    @staticmethod
    def _version(db: sqlite3.Connection) -> int:
        exists = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'perdure_migrations'"
        ).fetchone()
        if exists is None:
            return 0
        return int(
            db.execute("SELECT COALESCE(MAX(version), 0) FROM perdure_migrations").fetchone()[0]
        )

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise BackendUnavailableError(f"SQLite store {self.path!r} is not open")
        return self._db

    @contextmanager
    def _read(self) -> Generator[sqlite3.Connection, None, None]:
        try:
            yield self._conn()
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc

    @contextmanager
    def _write(self) -> Generator[sqlite3.Connection, None, None]:
        """One ``BEGIN IMMEDIATE`` transaction: committed if the body returns."""
        with self._read() as db, immediate(db):
            yield db

    def _run_row(self, db: sqlite3.Connection, run_id: str) -> RunInfo:
        row = db.execute(_SELECT_RUN, (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return decode_run(row)

    def _status(self, db: sqlite3.Connection, run_id: str) -> RunStatus:
        row = db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return status_of(row[0], run_id)

    @staticmethod
    def _next_seq(db: sqlite3.Connection, run_id: str) -> int:
        return int(db.execute(_NEXT_SEQ, (run_id,)).fetchone()[0])

    # ------------------------------------------------------------ runs

    async def create_run(
        self, new: NewRun, owner: str, lease_seconds: float
    ) -> tuple[RunInfo, Lease | None]:
        now = time.time()
        input_text = encode(new.input, f"input of run {new.run_id!r}")
        details_text = encode(new.details, f"details of run {new.run_id!r}")
        with self._write() as db:
            cur = db.execute(
                _INSERT_RUN,
                (
                    new.run_id,
                    new.workflow,
                    new.code_version,
                    owner,
                    now + lease_seconds,
                    new.parent_run_id,
                    details_text,
                    now,
                    now,
                ),
            )
            if cur.rowcount == 0:
                return self._run_row(db, new.run_id), None
            db.execute(
                _INSERT_EVENT,
                (new.run_id, 0, EventKind.RUN_STARTED.value, None, None, input_text, now),
            )
        info = decode_run(
            (
                new.run_id,
                new.workflow,
                RunStatus.RUNNING.value,
                input_text,
                None,
                None,
                new.code_version,
                owner,
                now + lease_seconds,
                1,
                False,
                None,
                None,
                None,
                new.parent_run_id,
                details_text,
                now,
                now,
            )
        )
        return info, Lease(new.run_id, owner, 1, 1)

    async def get_run(self, run_id: str) -> RunInfo:
        with self._read() as db:
            return self._run_row(db, run_id)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        updated_before: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        where = ["1 = 1"]
        params: dict[str, Any] = {"limit": limit}
        if statuses is not None:
            where.append("status IN (SELECT value FROM json_each(:statuses))")
            params["statuses"] = dumps([RunStatus(s).value for s in statuses])
        if updated_before is not None:
            where.append("updated_at < :updated_before")
            params["updated_before"] = updated_before
        if workflow is not None:
            where.append("workflow = :workflow")
            params["workflow"] = workflow
        sql = (
            f"SELECT {_RUN} FROM runs WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, rowid LIMIT :limit"
        )
        with self._read() as db:
            return [listed_run(row) for row in db.execute(sql, params).fetchall()]

    async def load_history(self, run_id: str) -> list[Event]:
        with self._read() as db:
            rows = db.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            if not rows:
                self._status(db, run_id)  # every run has run_started: tell why it is empty
        return [decode_event(row) for row in rows]

    # ------------------------------------------------------------ driving

    async def append(
        self,
        lease: Lease,
        events: Sequence[NewEvent],
        *,
        lease_seconds: float,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        now = time.time()
        run_id = lease.run_id
        rows = [
            (run_id, seq, ev.kind.value, ev.step_key, ev.name, encode_event(ev, run_id, seq), now)
            for seq, ev in enumerate(events, lease.next_seq)
        ]
        if update is None:
            sql, params = _EXTEND, (now + lease_seconds, now, run_id, lease.fence, lease.owner)
            awaited = None
        else:
            sql = _FINISH
            params = (
                update.status.value,
                encode(update.result, f"result of run {run_id!r}"),
                encode(update.error, f"error of run {run_id!r}"),
                update.waiting_for,
                update.wake_at,
                encode(update.attention, f"attention of run {run_id!r}"),
                now,
                run_id,
                lease.fence,
                lease.owner,
            )
            awaited = update.waiting_for if update.status is RunStatus.SUSPENDED else None
        # The hot path of every step: one transaction, spelled out to keep it lean.
        db = self._conn()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                fenced = db.execute(sql, params).fetchall()
                if fenced:
                    if len(rows) == 1:
                        db.execute(_INSERT_EVENT, rows[0])
                    elif rows:
                        db.executemany(_INSERT_EVENT, rows)
                    if consume_signal is not None:
                        db.execute(_CONSUME, (consume_signal,))
                    if awaited is not None:
                        # The awaited signal may already be in the inbox: then it is due now.
                        db.execute(_WAKE_IF_SIGNALLED, (now, run_id, run_id, awaited))
                    db.execute("COMMIT")
                else:
                    db.execute("ROLLBACK")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError as exc:
            raise LeaseLostError(
                f"run {run_id!r}: event #{lease.next_seq} is already recorded, so this "
                f"lease's view of the history is stale; nothing was written ({exc})"
            ) from exc
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc
        if not fenced:
            raise LeaseLostError(
                f"run {run_id!r}: the lease of {lease.owner} (fence {lease.fence}) "
                "was taken over; nothing was written"
            )
        lease.next_seq += len(rows)
        lease.cancel_requested = bool(fenced[0][0])

    async def acquire(
        self,
        run_id: str,
        owner: str,
        lease_seconds: float,
        *,
        now: float,
        break_owner: str | None = None,
    ) -> Lease | None:
        params = {
            "run_id": run_id,
            "owner": owner,
            "until": now + lease_seconds,
            "now": now,
            "brk": break_owner,
        }
        with self._write() as db:
            taken = db.execute(_ACQUIRE, params).fetchall()
            if not taken:
                self._status(db, run_id)  # RunNotFoundError if there is no such run
                return None
            fence, cancel = taken[0]
            return Lease(run_id, owner, int(fence), self._next_seq(db, run_id), bool(cancel))

    async def claim_due(
        self, owner: str, lease_seconds: float, *, now: float, workflows: Sequence[str], limit: int
    ) -> list[Lease]:
        if not workflows or limit <= 0:
            return []
        params = {
            "owner": owner,
            "until": now + lease_seconds,
            "now": now,
            "brk": None,
            "workflows": dumps(list(workflows)),
            "limit": limit,
        }
        with self._write() as db:
            taken = db.execute(_CLAIM, params).fetchall()
            taken.sort(key=lambda r: (r[3], r[0]))
            return [
                Lease(run_id, owner, int(fence), self._next_seq(db, run_id), bool(cancel))
                for run_id, fence, cancel, _ in taken
            ]

    async def next_wake(self, workflows: Sequence[str]) -> float | None:
        with self._read() as db:
            row = db.execute(
                "SELECT MIN(wake_at) FROM runs WHERE status = 'suspended' "
                "AND workflow IN (SELECT value FROM json_each(?))",
                (dumps(list(workflows)),),
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    async def renew(self, owner: str, lease_seconds: float, *, now: float) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE runs SET lease_until = ? WHERE owner = ?", (now + lease_seconds, owner)
            )

    async def release(self, lease: Lease) -> None:
        with self._write() as db:
            cur = db.execute(
                "UPDATE runs SET owner = NULL, lease_until = NULL "
                "WHERE run_id = ? AND fence = ? AND owner = ?",
                (lease.run_id, lease.fence, lease.owner),
            )
            if cur.rowcount == 0:
                self._status(db, lease.run_id)

    # ------------------------------------------------------------ signals and operators

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: Any,
        sent_by: str | None,
        *,
        now: float,
        authorization: dict[str, Any] | None = None,
    ) -> SignalRecord:
        payload_text = encode(payload, f"payload of signal {name!r} to run {run_id!r}")
        decision = encode(authorization, f"decision on signal {name!r} to run {run_id!r}")
        with self._write() as db:
            row = db.execute(
                "SELECT status, waiting_for FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            status = status_of(row[0], run_id)
            answer = approvals.is_approval(name)
            if answer:
                # Checked and answered inside this write: a second answer sees it answered.
                name = approvals.answer_channel(run_id, status, row[1], name)
            else:
                guards.check_can_signal(run_id, status)
            signal_id = db.execute(
                "INSERT INTO signals (run_id, name, payload, sent_by, sent_at, consumed, "
                "decision) VALUES (?, ?, ?, ?, ?, 0, ?) RETURNING id",
                (run_id, name, payload_text, sent_by, now, decision),
            ).fetchall()[0][0]
            if answer:
                db.execute(
                    "UPDATE runs SET wake_at = ?, waiting_for = NULL, attention = NULL "
                    "WHERE run_id = ?",
                    (now, run_id),
                )
            elif status is RunStatus.SUSPENDED and row[1] == name:
                db.execute("UPDATE runs SET wake_at = ? WHERE run_id = ?", (now, run_id))
        return decode_signal((signal_id, run_id, name, payload_text, sent_by, now, decision))

    async def next_signal(self, run_id: str, name: str) -> SignalRecord | None:
        with self._read() as db:
            row = db.execute(
                f"SELECT {SIGNAL_COLUMNS} FROM signals "
                "WHERE run_id = ? AND name = ? AND consumed = 0 ORDER BY id LIMIT 1",
                (run_id, name),
            ).fetchone()
        return None if row is None else decode_signal(row)

    async def request_cancel(self, run_id: str, *, now: float) -> RunInfo:
        with self._write() as db:
            guards.check_can_cancel(run_id, self._status(db, run_id))
            row = db.execute(
                "UPDATE runs SET cancel_requested = 1, "
                "wake_at = CASE WHEN status IN ('suspended', 'needs-attention') "
                "THEN ? ELSE wake_at END, "
                "status = CASE WHEN status IN ('suspended', 'needs-attention') "
                f"THEN 'suspended' ELSE status END WHERE run_id = ? RETURNING {_RUN}",
                (now, run_id),
            ).fetchall()[0]
        return decode_run(row)

    async def admin_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expect: Sequence[RunStatus],
        status: RunStatus,
        now: float,
    ) -> RunInfo:
        data = [encode(ev.data, f"run {run_id!r} event ({ev.kind.value})") for ev in events]
        with self._write() as db:
            guards.check_expected(run_id, self._status(db, run_id), expect)
            seq = self._next_seq(db, run_id)
            db.executemany(
                _INSERT_EVENT,
                [
                    (run_id, seq + i, ev.kind.value, ev.step_key, ev.name, text, now)
                    for i, (ev, text) in enumerate(zip(events, data, strict=True))
                ],
            )
            row = db.execute(
                "UPDATE runs SET status = ?, attention = NULL, wake_at = ?, updated_at = ? "
                f"WHERE run_id = ? RETURNING {_RUN}",
                (status.value, now, now, run_id),
            ).fetchall()[0]
        return decode_run(row)

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        if not run_ids:
            return []
        marks = ", ".join("?" for _ in run_ids)
        with self._write() as db:
            gone = [
                str(row[0])
                for row in db.execute(
                    f"DELETE FROM runs WHERE run_id IN ({marks}) "
                    "AND status IN ('succeeded', 'failed', 'cancelled') RETURNING run_id",
                    list(run_ids),
                ).fetchall()
            ]
            if gone:
                done = ", ".join("?" for _ in gone)
                db.execute(f"DELETE FROM events WHERE run_id IN ({done})", gone)
                db.execute(f"DELETE FROM signals WHERE run_id IN ({done})", gone)
        return gone


def open_backend(url: str) -> EmbeddedBackend:
    """The embedded engine on the SQLite file ``url`` names."""
    from perdure._engine.backend import EmbeddedBackend

    return EmbeddedBackend(SqliteStore(url))
