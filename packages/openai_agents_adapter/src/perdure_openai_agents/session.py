"""``PerdureSession``: durable conversation memory on the run store.

Items live in the table ``agent_session_items`` of the same SQLite file, or the same
PostgreSQL schema, as perdure's runs. Inside a durable run every session operation is a
recorded step, so a replay after a crash reads the snapshot the run saw and never writes
twice; each write also carries the step's idempotency key, so a write that landed just
before a crash (and is re-executed) is not applied again.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings

from perdure import ConfigurationError
from perdure.spi import RetryPolicy, StepSpec, current_run, recording_run, resolve_url

TABLE = "agent_session_items"

_WRITE_RETRY = RetryPolicy(max_attempts=5, initial_interval=0.2)
_READ = StepSpec("session:get_items")
_ADD = StepSpec("session:add_items", "effect", _WRITE_RETRY, idempotent_receiver=True)
_POP = StepSpec("session:pop_item", "effect", _WRITE_RETRY, idempotent_receiver=True)
_CLEAR = StepSpec("session:clear", "effect", _WRITE_RETRY, idempotent_receiver=True)


def run_store_url() -> str | None:
    """The URL of the store the current run lives on, if the backend says."""
    ctx = current_run.get()
    return None if ctx is None else ctx.url


class _Sqlite:
    def __init__(self, url: str) -> None:
        from perdure.spi import parse_sqlite_url

        self.path, self.synchronous = parse_sqlite_url(url)
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA busy_timeout=30000")
            db.execute(
                f"""CREATE TABLE IF NOT EXISTS {TABLE} (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    session_id TEXT NOT NULL,
                    write_key TEXT NOT NULL,
                    item TEXT NOT NULL,
                    created_at REAL NOT NULL,
                    popped_by TEXT,
                    UNIQUE (session_id, write_key))"""
            )
            db.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_by_session ON {TABLE} (session_id, id)")
            self._db = db
        return self._db

    async def get(self, sid: str, limit: int | None) -> list[str]:
        db = self._conn()
        live = f"SELECT id, item FROM {TABLE} WHERE session_id = ? AND popped_by IS NULL"
        if limit is None:
            rows = db.execute(f"{live} ORDER BY id", (sid,)).fetchall()
        else:
            rows = db.execute(f"{live} ORDER BY id DESC LIMIT ?", (sid, limit)).fetchall()
            rows.reverse()
        return [r[1] for r in rows]

    async def add(self, sid: str, key: str, items: list[str]) -> None:
        db = self._conn()
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                f"""INSERT INTO {TABLE} (session_id, write_key, item, created_at)
                    VALUES (?, ?, ?, ?) ON CONFLICT (session_id, write_key) DO NOTHING""",
                [(sid, f"{key}#{i}", item, now) for i, item in enumerate(items)],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def pop(self, sid: str, key: str) -> str | None:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                f"SELECT item FROM {TABLE} WHERE session_id = ? AND popped_by = ?", (sid, key)
            ).fetchone()
            if row is None:
                row = db.execute(
                    f"""UPDATE {TABLE} SET popped_by = ? WHERE id = (
                        SELECT MAX(id) FROM {TABLE} WHERE session_id = ? AND popped_by IS NULL)
                        RETURNING item""",
                    (key, sid),
                ).fetchone()
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return None if row is None else str(row[0])

    async def clear(self, sid: str) -> None:
        self._conn().execute(f"DELETE FROM {TABLE} WHERE session_id = ?", (sid,))

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class _Postgres:
    def __init__(self, url: str) -> None:
        try:
            from perdure.spi import parse_postgres_url
        except ImportError as exc:  # pragma: no cover - without perdure[postgres]
            raise ConfigurationError(
                f"PerdureSession on {url.split('@')[-1]!r} needs psycopg: "
                "pip install 'perdure[postgres]'"
            ) from exc
        self.conninfo, self.schema, _ = parse_postgres_url(url)
        self.table = f'"{self.schema}".{TABLE}'
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, connect_timeout=10
            )
            async with conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))",
                    (f"perdure:{self.schema}:{TABLE}",),
                )
                await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'.encode())
                await conn.execute(
                    f"""CREATE TABLE IF NOT EXISTS {self.table} (
                        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                        session_id TEXT NOT NULL,
                        write_key TEXT NOT NULL,
                        item TEXT NOT NULL,
                        created_at DOUBLE PRECISION NOT NULL,
                        popped_by TEXT,
                        UNIQUE (session_id, write_key))""".encode()
                )
                await conn.execute(
                    f"""CREATE INDEX IF NOT EXISTS {TABLE}_by_session
                        ON {self.table} (session_id, id)""".encode()
                )
            self._conn = conn
        return self._conn

    async def get(self, sid: str, limit: int | None) -> list[str]:
        async with self._lock:
            conn = await self._connection()
            live = f"SELECT id, item FROM {self.table} WHERE session_id = %s AND popped_by IS NULL"
            if limit is None:
                cur = await conn.execute(f"{live} ORDER BY id".encode(), (sid,))
                rows = await cur.fetchall()
            else:
                cur = await conn.execute(f"{live} ORDER BY id DESC LIMIT %s".encode(), (sid, limit))
                rows = list(reversed(await cur.fetchall()))
        return [r[1] for r in rows]

    async def add(self, sid: str, key: str, items: list[str]) -> None:
        now = time.time()
        async with self._lock:
            conn = await self._connection()
            async with conn.transaction(), conn.cursor() as cur:
                await cur.executemany(
                    f"""INSERT INTO {self.table} (session_id, write_key, item, created_at)
                        VALUES (%s, %s, %s, %s)
                        ON CONFLICT (session_id, write_key) DO NOTHING""".encode(),
                    [(sid, f"{key}#{i}", item, now) for i, item in enumerate(items)],
                )

    async def pop(self, sid: str, key: str) -> str | None:
        async with self._lock:
            conn = await self._connection()
            async with conn.transaction():
                done = f"SELECT item FROM {self.table} WHERE session_id = %s AND popped_by = %s"
                cur = await conn.execute(done.encode(), (sid, key))
                row = await cur.fetchone()
                if row is None:
                    cur = await conn.execute(
                        f"""UPDATE {self.table} SET popped_by = %s WHERE id = (
                            SELECT id FROM {self.table}
                            WHERE session_id = %s AND popped_by IS NULL
                            ORDER BY id DESC LIMIT 1 FOR UPDATE)
                            RETURNING item""".encode(),
                        (key, sid),
                    )
                    row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def clear(self, sid: str) -> None:
        async with self._lock:
            conn = await self._connection()
            await conn.execute(f"DELETE FROM {self.table} WHERE session_id = %s".encode(), (sid,))

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def _open_store(url: str) -> _Sqlite | _Postgres:
    from perdure.spi import state_url

    # The SQL database of the backend: the store itself, DBOS's own database, or what a
    # Temporal URL names for adapter state.
    url = state_url(url)
    if url.split("://", 1)[0].lower() == "sqlite":
        return _Sqlite(url)
    return _Postgres(url)


class PerdureSession(SessionABC):
    """Conversation memory on the perdure store, consistent with run history.

    ``url`` defaults to the store of the durable run using the session — and stays
    there once a run used it — else the configured one (``PERDURE_URL``, pyproject,
    default). Outside a durable run it behaves as a plain SQL-backed session.
    """

    def __init__(
        self,
        session_id: str,
        *,
        url: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.url = url
        self.session_settings = session_settings
        self._bound_url: str | None = None
        self._stores: dict[str, _Sqlite | _Postgres] = {}

    def __repr__(self) -> str:
        return f"PerdureSession({self.session_id!r})"

    @property
    def store_url(self) -> str:
        """The store this session reads and writes now."""
        if self.url is not None:
            return self.url
        in_run = run_store_url()
        if in_run is not None:
            self._bound_url = in_run  # later calls outside the run use the same store
            return in_run
        return self._bound_url or resolve_url(None)

    def _store(self) -> _Sqlite | _Postgres:
        url = self.store_url
        store = self._stores.get(url)
        if store is None:
            store = self._stores[url] = _open_store(url)
        return store

    async def _journaled(self, spec: StepSpec, fn: Callable[[str], Any]) -> Any:
        """``fn(key)`` as a recorded step inside a run; plainly, with a fresh key, outside."""
        ctx = recording_run()
        if ctx is None:
            return await fn(uuid.uuid4().hex)

        async def step() -> Any:
            return await fn(ctx.idempotency_key())

        return await ctx.step(spec, step, (), {})

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit

        async def read(_key: str) -> list[Any]:
            return [json.loads(raw) for raw in await self._store().get(self.session_id, limit)]

        return await self._journaled(_READ, read)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        encoded = [json.dumps(item, separators=(",", ":"), ensure_ascii=False) for item in items]

        async def write(key: str) -> int:
            await self._store().add(self.session_id, key, encoded)
            return len(encoded)

        await self._journaled(_ADD, write)

    async def pop_item(self) -> TResponseInputItem | None:
        async def pop(key: str) -> Any:
            raw = await self._store().pop(self.session_id, key)
            return None if raw is None else json.loads(raw)

        return await self._journaled(_POP, pop)

    async def clear_session(self) -> None:
        async def clear(_key: str) -> None:
            await self._store().clear(self.session_id)

        await self._journaled(_CLEAR, clear)

    async def close(self) -> None:
        """Close this session's connections."""
        stores = list(self._stores.values())
        self._stores.clear()
        for store in stores:
            await store.close()
