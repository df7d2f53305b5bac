"""The gateway's ledger in the SQLite file of a ``sqlite:///`` store.

One connection, used synchronously from the async methods as the store does: a local
commit costs less than a hop to a thread, and no ``await`` happens inside a
transaction. ``BEGIN IMMEDIATE`` takes the file's write lock up front, so gateways in
several processes serialize their claims on it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Generator, Sequence
from contextlib import contextmanager

from perdure.errors import BackendUnavailableError
from perdure.gateway.ledger import COLUMNS, INLINE_BODY, Ledger, decode_row, encode_headers
from perdure.gateway.records import Attempt, State, StoredResponse
from perdure.stores.faults import sqlite_error
from perdure.stores.sqlite import parse_sqlite_url

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS gateway_attempts (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL,
        owner TEXT,
        started_at REAL NOT NULL,
        lease_until REAL,
        finished_at REAL,
        status INTEGER,
        headers TEXT,
        body BLOB,
        body_size INTEGER,
        body_aside INTEGER NOT NULL DEFAULT 0,
        reason TEXT,
        expires_at REAL,
        PRIMARY KEY (scope, key)
    )""",
    "CREATE INDEX IF NOT EXISTS gateway_attempts_expiry ON gateway_attempts (expires_at)",
    """CREATE TABLE IF NOT EXISTS gateway_bodies (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        body BLOB NOT NULL,
        PRIMARY KEY (scope, key)
    )""",
)

_CLAIM = """INSERT INTO gateway_attempts
    (scope, key, fingerprint, state, owner, started_at, lease_until)
    VALUES (?, ?, ?, 'in_flight', ?, ?, ?) ON CONFLICT (scope, key) DO NOTHING"""
_GET = f"SELECT {COLUMNS} FROM gateway_attempts WHERE scope = ? AND key = ?"
_BODY = "SELECT body FROM gateway_bodies WHERE scope = ? AND key = ?"
_FINISH = """UPDATE gateway_attempts SET state = 'done', owner = NULL, lease_until = NULL,
    finished_at = ?, status = ?, headers = ?, body = ?, body_size = ?, body_aside = ?,
    expires_at = ?
    WHERE scope = ? AND key = ? AND state = 'in_flight' AND owner = ?"""
_ASIDE = "INSERT OR REPLACE INTO gateway_bodies (scope, key, body) VALUES (?, ?, ?)"
_RELEASE = (
    "DELETE FROM gateway_attempts WHERE scope = ? AND key = ? AND state = 'in_flight' AND owner = ?"
)
_UNKNOWN = """UPDATE gateway_attempts SET state = 'unknown', lease_until = NULL, reason = ?
    WHERE scope = ? AND key = ? AND state = 'in_flight' AND owner IS ?"""
_RENEW = """UPDATE gateway_attempts SET lease_until = ?
    WHERE scope = ? AND key = ? AND state = 'in_flight' AND owner = ?"""
_FORGET = "DELETE FROM gateway_attempts WHERE scope = ? AND key = ?"
_FORGET_BODY = "DELETE FROM gateway_bodies WHERE scope = ? AND key = ?"
_EXPIRED = "state = 'done' AND expires_at < ?"
_PURGE_BODIES = f"""DELETE FROM gateway_bodies WHERE (scope, key) IN (
    SELECT scope, key FROM gateway_attempts WHERE {_EXPIRED})"""
_PURGE = f"DELETE FROM gateway_attempts WHERE {_EXPIRED}"


class SqliteLedger(Ledger):
    def __init__(self, url: str) -> None:
        self.path, self.synchronous = parse_sqlite_url(url)
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        if self._db is not None:
            return
        try:
            db = sqlite3.connect(
                self.path, timeout=10.0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc
        try:
            db.execute("PRAGMA busy_timeout = 10000")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
            with _transaction(db):
                for statement in _SCHEMA:
                    db.execute(statement)
        except sqlite3.Error as exc:
            db.close()
            raise sqlite_error(exc, self.path) from exc
        self._db = db

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    @contextmanager
    def _tx(self) -> Generator[sqlite3.Connection, None, None]:
        """The connection inside ``BEGIN IMMEDIATE``; driver errors typed."""
        if self._db is None:
            raise BackendUnavailableError(f"gateway ledger {self.path!r} is not open")
        try:
            with _transaction(self._db):
                yield self._db
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, now: float, lease_until: float
    ) -> Attempt | None:
        with self._tx() as db:
            if db.execute(_CLAIM, (scope, key, fingerprint, owner, now, lease_until)).rowcount:
                return None
            return self._read(db, scope, key)

    async def finish(
        self,
        scope: str,
        key: str,
        owner: str,
        response: StoredResponse,
        now: float,
        expires_at: float,
    ) -> bool:
        body = response.body
        aside = body is not None and len(body) > INLINE_BODY
        with self._tx() as db:
            done = db.execute(
                _FINISH,
                (
                    now,
                    response.status,
                    encode_headers(response.headers),
                    None if aside else body,
                    response.body_size,
                    int(aside),
                    expires_at,
                    scope,
                    key,
                    owner,
                ),
            ).rowcount
            if done and aside:
                db.execute(_ASIDE, (scope, key, body))
            return bool(done)

    async def release(self, scope: str, key: str, owner: str) -> None:
        with self._tx() as db:
            db.execute(_RELEASE, (scope, key, owner))

    async def mark_unknown(self, scope: str, key: str, owner: str | None, reason: str) -> bool:
        with self._tx() as db:
            return bool(db.execute(_UNKNOWN, (reason, scope, key, owner)).rowcount)

    async def renew(self, owner: str, keys: Sequence[tuple[str, str]], lease_until: float) -> None:
        if not keys:
            return
        with self._tx() as db:
            db.executemany(_RENEW, [(lease_until, scope, key, owner) for scope, key in keys])

    async def get(self, scope: str, key: str) -> Attempt | None:
        with self._tx() as db:
            return self._read(db, scope, key)

    @staticmethod
    def _read(db: sqlite3.Connection, scope: str, key: str) -> Attempt | None:
        row = db.execute(_GET, (scope, key)).fetchone()
        if row is None:
            return None
        aside = None
        if row[12]:  # body_aside
            found = db.execute(_BODY, (scope, key)).fetchone()
            aside = None if found is None else bytes(found[0])
        return decode_row(row, aside)

    async def attempts(
        self, states: Sequence[State] | None = None, limit: int = 100
    ) -> list[Attempt]:
        sql = f"SELECT {COLUMNS} FROM gateway_attempts"
        params: list[object] = []
        if states:
            sql += f" WHERE state IN ({', '.join('?' for _ in states)})"
            params.extend(states)
        sql += " ORDER BY started_at DESC LIMIT ?"
        params.append(limit)
        with self._tx() as db:
            rows = db.execute(sql, params).fetchall()
        return [decode_row(row) for row in rows]

    async def forget(self, scope: str, key: str) -> bool:
        with self._tx() as db:
            db.execute(_FORGET_BODY, (scope, key))
            return bool(db.execute(_FORGET, (scope, key)).rowcount)

    async def purge(self, now: float) -> int:
        with self._tx() as db:
            db.execute(_PURGE_BODIES, (now,))
            return db.execute(_PURGE, (now,)).rowcount


@contextmanager
def _transaction(db: sqlite3.Connection) -> Generator[None, None, None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
