"""Connections for the checkpointer: one SQLite connection, or psycopg pools for PostgreSQL.

Every database operation is written once as a generator (an *op*) that yields
:class:`Stmt` objects and receives the fetched rows back. A driver runs an op inside one
transaction, synchronously or (PostgreSQL) asynchronously, so the sync and async saver
methods share all their logic.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from perdure.spi import BackendUnavailableError, ConfigurationError, SubstrateError
from perdure_langgraph._sql import (
    POSTGRES_MIGRATIONS,
    SQLITE,
    SQLITE_MIGRATIONS,
    Dialect,
    postgres_dialect,
)
from perdure_langgraph._url import PostgresTarget, SqliteTarget

if TYPE_CHECKING:
    from psycopg import AsyncCursor
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

T = TypeVar("T")
Row = tuple[Any, ...]


class Stmt(NamedTuple):
    """One statement of an op: run once (``params``) or for each of ``many`` parameter rows."""

    sql: str
    params: Sequence[Any] = ()
    fetch: bool = False
    many: Sequence[Sequence[Any]] | None = None


#: An op yields statements; a fetching statement gets its rows back, any other ``None``.
#: A plain list of statements (a *batch*) is an op too: it runs as is and returns the rows
#: of its last fetching statement (or ``None``).
Op = Generator[Stmt, Any, T]


def _drive(cur: Any, op: Op[T] | list[Stmt]) -> T:
    """Run ``op`` on a DB-API cursor (sqlite3 or psycopg), feeding back fetched rows."""
    if isinstance(op, list):
        fetched: list[Row] | None = None
        for stmt in op:
            if stmt.many is not None:
                cur.executemany(stmt.sql, stmt.many)
            else:
                cur.execute(stmt.sql, stmt.params)
                if stmt.fetch:
                    fetched = cur.fetchall()
        return fetched  # type: ignore[return-value]
    try:
        stmt = next(op)
        while True:
            rows: list[Row] | None = None
            if stmt.many is not None:
                if stmt.many:
                    cur.executemany(stmt.sql, stmt.many)
            else:
                cur.execute(stmt.sql, stmt.params)
                if stmt.fetch:
                    rows = cur.fetchall()
            stmt = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _adrive(cur: AsyncCursor[Any], op: Op[T] | list[Stmt]) -> T:
    """Run ``op`` on a psycopg async cursor (a query built at run time goes as bytes)."""
    if isinstance(op, list):
        fetched: list[Row] | None = None
        for stmt in op:
            if stmt.many is not None:
                await cur.executemany(stmt.sql.encode(), stmt.many)
            else:
                await cur.execute(stmt.sql.encode(), stmt.params)
                if stmt.fetch:
                    fetched = await cur.fetchall()
        return fetched  # type: ignore[return-value]
    try:
        stmt = next(op)
        while True:
            rows: list[Row] | None = None
            if stmt.many is not None:
                if stmt.many:
                    await cur.executemany(stmt.sql.encode(), stmt.many)
            else:
                await cur.execute(stmt.sql.encode(), stmt.params)
                if stmt.fetch:
                    rows = await cur.fetchall()
            stmt = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class Driver:
    """What the saver needs from a database: run ops, in sync or async code."""

    dialect: Dialect
    description: str

    def run(self, op: Op[T] | list[Stmt], *, write: bool, urgent: bool = True) -> T:
        """Run ``op`` in one transaction and return its result once it is durable.

        ``urgent=False`` marks a write that something else usually follows at once (a
        task's writes, then the superstep's checkpoint): a driver may let that next
        commit make both durable with one flush.
        """
        raise NotImplementedError

    async def arun(self, op: Op[T] | list[Stmt], *, write: bool, urgent: bool = True) -> T:
        """Async :meth:`run`."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        self.close()


def _migration_plan(current: int, migrations: Sequence[Sequence[str]], where: str) -> range:
    if current > len(migrations):
        raise ConfigurationError(
            f"{where}: the perdure-langgraph tables are at schema version {current}, newer "
            f"than this version of perdure-langgraph knows ({len(migrations)}); upgrade it"
        )
    return range(current + 1, len(migrations) + 1)


# ---------------------------------------------------------------- SQLite


class GroupCommit:
    """Lets a task's writes become durable through the flush of the checkpoint after them.

    Positions are increasing numbers (a commit counter on SQLite, a WAL position on
    PostgreSQL). An *urgent* commit (a checkpoint, an error or interrupt write, any
    maintenance) flushes right away and then reports the position it made durable. A
    *non-urgent* commit (a task's ordinary writes) is not flushed by itself: its caller
    waits until an urgent commit reports a position at or past its own. It waits only
    while an urgent commit is in flight or, when none is, for ``grace`` seconds; after
    that it flushes itself. Either way the call returns only once its data is durable,
    and a superstep's writes plus its checkpoint cost one flush instead of two.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._cond = threading.Condition()
        self._durable = 0
        self._in_flight = 0

    @property
    def durable(self) -> int:
        """The highest position known to be durable."""
        return self._durable

    def urgent_begin(self) -> None:
        """An urgent commit starts (it will call :meth:`urgent_end`)."""
        with self._cond:
            self._in_flight += 1

    def urgent_end(self, durable: int | None) -> None:
        """An urgent commit ended; ``durable`` is what it made durable (``None``: failed)."""
        with self._cond:
            self._in_flight -= 1
            if durable is not None and durable > self._durable:
                self._durable = durable
            self._cond.notify_all()

    def advanced(self, durable: int) -> None:
        """A flush made everything up to ``durable`` durable."""
        with self._cond:
            if durable > self._durable:
                self._durable = durable
                self._cond.notify_all()

    #: However many urgent commits come and go, stop waiting for them after this long.
    max_wait = 1.0

    def wait(self, position: int) -> bool:
        """Wait for ``position`` to become durable; ``False`` means: flush it yourself."""
        start = time.monotonic()
        deadline = start + self.grace
        cond = self._cond
        with cond:
            while self._durable < position:
                now = time.monotonic()
                if self._in_flight and now - start < self.max_wait:
                    cond.wait(start + self.max_wait - now)
                    continue
                if now >= deadline or now - start >= self.max_wait:
                    return False
                cond.wait(deadline - now)
            return True


#: What SQLite itself calls at commit on this platform: fdatasync where there is one.
_datasync = getattr(os, "fdatasync", os.fsync)


class _WalFile:
    """Commit numbering and fsync of a SQLite WAL file (``synchronous=full``)."""

    def __init__(self, path: str, grace: float) -> None:
        self.path = path
        self.group = GroupCommit(grace)
        self._count = 0
        self._count_lock = threading.Lock()
        self._fd: int | None = None

    def committed(self) -> int:
        """Number a commit (call right after COMMIT, under the write lock)."""
        with self._count_lock:
            self._count += 1
            return self._count

    def flush(self) -> int:
        """fdatasync the WAL; returns the last commit number it covers."""
        with self._count_lock:
            target = self._count
            fd = self._fd
            if fd is None:
                try:
                    # kept open: SQLite keeps the WAL file while our connection is open
                    fd = self._fd = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    return target  # nothing written yet, or checkpointed and removed
        _datasync(fd)
        return target

    def close(self) -> None:
        """Close the WAL file descriptor."""
        with self._count_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class SqliteDriver(Driver):
    """One stdlib ``sqlite3`` connection in WAL mode, shared by threads under a lock.

    With ``synchronous=full``/``extra`` every write returns only after the WAL holding
    it has been fsynced, as SQLite's own FULL does at commit; the fsync happens after the
    write lock is released and is shared between commits (see :class:`GroupCommit`).
    """

    dialect = SQLITE
    #: How long a task's writes wait for a checkpoint commit to start and flush them too.
    group_commit_grace = 0.0005

    def __init__(self, target: SqliteTarget) -> None:
        self.target = target
        self.description = f"SQLite database {target.path!r}"
        self._lock = threading.Lock()
        try:
            if target.path != ":memory:":
                parent = os.path.dirname(os.path.abspath(target.path))
                if not os.path.isdir(parent):
                    raise ConfigurationError(
                        f"cannot open {self.description}: directory {parent!r} does not exist"
                    )
            conn = sqlite3.connect(target.path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"cannot open {self.description}: {exc}") from exc
        self._conn = conn
        self._wal: _WalFile | None = None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(target.busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            level = target.synchronous
            if mode == "wal" and level in ("full", "extra") and target.path != ":memory:":
                # FULL durability, with the fsync done by us outside the write lock.
                wal_path = os.path.abspath(target.path) + "-wal"
                self._wal = _WalFile(wal_path, self.group_commit_grace)
                conn.execute("PRAGMA synchronous = NORMAL")
            else:
                conn.execute(f"PRAGMA synchronous = {level.upper()}")
            self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise BackendUnavailableError(f"cannot set up {self.description}: {exc}") from exc

    @property
    def synchronous(self) -> str:
        """The durability level of a commit (``off`` for an in-memory database)."""
        return "off" if self.target.path == ":memory:" else self.target.synchronous

    def pragma(self, name: str) -> Any:
        """Read a PRAGMA from the connection."""
        with self._lock:
            return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute("CREATE TABLE IF NOT EXISTS lg_migrations (v INTEGER PRIMARY KEY)")
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = conn.execute("SELECT coalesce(max(v), 0) FROM lg_migrations").fetchone()[0]
            for version in _migration_plan(current, SQLITE_MIGRATIONS, self.description):
                for statement in SQLITE_MIGRATIONS[version - 1]:
                    conn.execute(statement)
                conn.execute("INSERT INTO lg_migrations (v) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def run(self, op: Op[T] | list[Stmt], *, write: bool, urgent: bool = True) -> T:
        """Run ``op`` in a transaction (``BEGIN IMMEDIATE`` for writes)."""
        wal = self._wal if write else None
        if wal is None:
            return self._transact(op, write)[0]
        group = wal.group
        if not urgent:
            result, seq = self._transact(op, write)
            if not group.wait(seq):
                group.advanced(wal.flush())
            return result
        group.urgent_begin()
        durable: int | None = None
        try:
            result, seq = self._transact(op, write)
            durable = seq if group.durable >= seq else wal.flush()
        finally:
            group.urgent_end(durable)
        return result

    def _transact(self, op: Op[T] | list[Stmt], write: bool) -> tuple[T, int]:
        """One transaction; returns the result of ``op`` and the commit number (0 without
        ``synchronous=full``)."""
        try:
            with self._lock:
                cur = self._conn.cursor()
                try:
                    return self._transact_locked(cur, op, write)
                finally:
                    cur.close()
        except sqlite3.DatabaseError as exc:
            if _sqlite_unavailable(exc):
                raise BackendUnavailableError(f"{self.description}: {exc}") from exc
            # SQLite refused for good (a corrupt file, a row its JSON functions cannot
            # read): a typed error naming the database, not a bare sqlite3 one.
            raise SubstrateError(f"{self.description}: {exc}") from exc

    def _transact_locked(
        self, cur: sqlite3.Cursor, op: Op[T] | list[Stmt], write: bool
    ) -> tuple[T, int]:
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            result = _drive(cur, op)
            cur.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return result, self._wal.committed() if (write and self._wal is not None) else 0

    async def arun(self, op: Op[T] | list[Stmt], *, write: bool, urgent: bool = True) -> T:
        """Run ``op`` in a worker thread."""
        return await asyncio.to_thread(self.run, op, write=write, urgent=urgent)

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()
            if self._wal is not None:
                self._wal.close()


_SQLITE_UNAVAILABLE = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_FULL",
    "SQLITE_READONLY",
)


def _sqlite_unavailable(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(_SQLITE_UNAVAILABLE)


# ---------------------------------------------------------------- PostgreSQL


_INSERT_LSN = b"SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"
_FLUSH_LSN = b"SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint"
_ASYNC_COMMIT = b"SET LOCAL synchronous_commit TO off"
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE


def _flush_op() -> list[Stmt]:
    """A transaction that takes a transaction id, so its (synchronous) commit flushes."""
    return [Stmt("SELECT txid_current()")]


def _advisory_key(schema: str) -> int:
    digest = hashlib.blake2b(f"perdure_langgraph:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresDriver(Driver):
    """psycopg 3 connection pools: one for sync callers, one per event loop for async ones.

    Each op runs in one transaction in pipeline mode, so a write (``BEGIN``, the
    inserts, ``COMMIT``) costs a single round trip. Non-urgent writes (a task's ordinary
    writes) commit without waiting for the WAL flush and then wait, through
    :class:`GroupCommit`, for the flush of the checkpoint commit that follows them; the
    WAL positions read after each commit prove which flush covers which commit.
    """

    #: How long a task's writes wait for a checkpoint commit to start and flush them too
    #: (longer than on SQLite: a round trip to the server must fit in it).
    group_commit_grace = 0.002

    def __init__(self, target: PostgresTarget) -> None:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool
        except ImportError as exc:
            raise ConfigurationError(
                "PerdureSaver on PostgreSQL needs psycopg 3 and psycopg_pool: "
                'pip install "perdure[postgres]"'
            ) from exc
        self.target = target
        self.dialect = postgres_dialect(target.schema)
        self.description = f"PostgreSQL {target.display} (schema {target.schema!r})"
        self._pool_kwargs: dict[str, Any] = {
            "conninfo": target.conninfo,
            "min_size": 1,
            "max_size": target.pool_max_size,
            "kwargs": {"autocommit": True},
            "open": False,
        }
        self._pool: ConnectionPool = psycopg_pool.ConnectionPool(**self._pool_kwargs)
        self._apools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool] = {}
        self._group = GroupCommit(self.group_commit_grace)
        #: With synchronous standbys a commit is durable once replicated, so only what
        #: precedes its commit record (not the local flush position) counts as covered.
        self._urgent_position = _FLUSH_LSN
        try:
            self._pool.open(wait=True, timeout=target.connect_timeout_s)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise BackendUnavailableError(
                f"cannot connect to {self.description} within {target.connect_timeout_s:g}s"
            ) from exc
        try:
            self._migrate()
        except BaseException:
            self._pool.close()
            raise

    def _migrate(self) -> None:
        p = self.dialect.prefix
        with self._wrap(), self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_advisory_key(self.target.schema),))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {p[:-1]}".encode())
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {p}lg_migrations (v INTEGER PRIMARY KEY)".encode()
            )
            standbys = conn.execute("SELECT current_setting('synchronous_standby_names')")
            row = standbys.fetchone()
            if row and row[0]:
                self._urgent_position = _INSERT_LSN
            row = conn.execute(
                f"SELECT coalesce(max(v), 0) FROM {p}lg_migrations".encode()
            ).fetchone()
            current = int(row[0]) if row else 0
            for version in _migration_plan(current, POSTGRES_MIGRATIONS, self.description):
                for statement in POSTGRES_MIGRATIONS[version - 1]:
                    conn.execute(self.dialect.sql(statement).encode())
                conn.execute(f"INSERT INTO {p}lg_migrations (v) VALUES (%s)".encode(), (version,))

    def _wrap(self) -> _PgErrors:
        return _PgErrors(self.description)

    def run(self, op: Op[T] | list[Stmt], *, write: bool, urgent: bool = True) -> T:
        """Run ``op`` in one pipelined transaction on a pooled connection."""
        if not write:
            with (
                self._wrap(),
                self._pool.connection() as conn,
                conn.pipeline(),
                conn.transaction(),
                conn.cursor(binary=True) as cur,
            ):
                return _drive(cur, op)
        group = self._group
        if not urgent:
            result, position = self._write(op, urgent=False)
            if not group.wait(position):
                group.advanced(self._write(_flush_op(), urgent=True)[1])
            return result
        group.urgent_begin()
        durable: int | None = None
        try:
            result, durable = self._write(op, urgent=True)
        finally:
            group.urgent_end(durable)
        return result

    def _write(self, op: Op[T] | list[Stmt], *, urgent: bool) -> tuple[T, int]:
        """Run a write transaction; also return the WAL position it proves durable
        (urgent) or needs durable (non-urgent)."""
        with self._wrap(), self._pool.connection() as conn:
            if isinstance(op, list):
                return self._batch(conn, op, urgent)
            try:
                with conn.pipeline(), conn.cursor(binary=True) as cur, conn.cursor() as pos:
                    cur.execute(b"BEGIN")
                    if not urgent:
                        cur.execute(_ASYNC_COMMIT)
                    result = _drive(cur, op)
                    if urgent and self._urgent_position is _INSERT_LSN:
                        pos.execute(_INSERT_LSN)
                        cur.execute(b"COMMIT")
                    else:
                        cur.execute(b"COMMIT")
                        pos.execute(self._urgent_position if urgent else _INSERT_LSN)
                    row = pos.fetchone()
            except BaseException:
                if conn.info.transaction_status != _IDLE:
                    conn.rollback()
                raise
        return result, int(row[0]) if row else 0

    def _batch_sql(
        self, batch: list[Stmt], urgent: bool
    ) -> tuple[bytes, list[Any], int, int | None]:
        """One multi-statement query for a batch: BEGIN, the statements, COMMIT and the WAL
        position, sent in a single round trip (parameters bound client-side). Also returns
        the indexes of the results holding the position and the batch's fetched rows."""
        parts: list[bytes] = [b"BEGIN"]
        params: list[Any] = []
        fetch_index: int | None = None
        if not urgent:
            parts.append(_ASYNC_COMMIT)
        for stmt in batch:
            sql = stmt.sql.encode()
            if stmt.many is not None:
                for row in stmt.many:
                    parts.append(sql)
                    params.extend(row)
            else:
                if stmt.fetch:
                    fetch_index = len(parts)
                parts.append(sql)
                params.extend(stmt.params)
        if urgent and self._urgent_position is _INSERT_LSN:
            parts += [_INSERT_LSN, b"COMMIT"]
            index = len(parts) - 2
        else:
            parts += [b"COMMIT", self._urgent_position if urgent else _INSERT_LSN]
            index = len(parts) - 1
        return b";".join(parts), params, index, fetch_index

    @staticmethod
    def _results(cur: Any, index: int, fetch_index: int | None) -> tuple[Any, int]:
        rows: list[Row] | None = None
        position: Row | None = None
        at = 0
        while True:
            if at == fetch_index:
                rows = cur.fetchall()
            elif at == index:
                position = cur.fetchone()
            if not cur.nextset():
                break
            at += 1
        return rows, int(position[0]) if position else 0

    @staticmethod
    async def _aresults(cur: Any, index: int, fetch_index: int | None) -> tuple[Any, int]:
        rows: list[Row] | None = None
        position: Row | None = None
        at = 0
        while True:
            if at == fetch_index:
                rows = await cur.fetchall()
            elif at == index:
                position = await cur.fetchone()
            if not cur.nextset():
                break
            at += 1
        return rows, int(position[0]) if position else 0

    def _batch(self, conn: Any, batch: list[Stmt], urgent: bool) -> tuple[Any, int]:
        import psycopg

        sql, params, index, fetch_index = self._batch_sql(batch, urgent)
        cur = psycopg.ClientCursor(conn)
        try:
            cur.execute(sql, params)
            return self._results(cur, index, fetch_index)
        except BaseException:
            if conn.info.transaction_status != _IDLE:
                conn.rollback()
            raise
        finally:
            cur.close()

    async def _abatch(self, conn: Any, batch: list[Stmt], urgent: bool) -> tuple[Any, int]:
        import psycopg

        sql, params, index, fetch_index = self._batch_sql(batch, urgent)
        cur = psycopg.AsyncClientCursor(conn)
        try:
            await cur.execute(sql, params)
            return await self._aresults(cur, index, fetch_index)
        except BaseException:
            if conn.info.transaction_status != _IDLE:
                await conn.rollback()
            raise
        finally:
            await cur.close()

    async def _apool(self) -> AsyncConnectionPool:
        import psycopg_pool

        loop = asyncio.get_running_loop()
        pool = self._apools.get(loop)
        if pool is None:
            for stale in [lp for lp in self._apools if lp.is_closed()]:
                del self._apools[stale]  # its loop is gone; so are its tasks
            pool = psycopg_pool.AsyncConnectionPool(**self._pool_kwargs)
            self._apools[loop] = pool
            try:
                await pool.open(wait=True, timeout=self.target.connect_timeout_s)
            except psycopg_pool.PoolTimeout as exc:
                self._apools.pop(loop, None)
                await pool.close()
                raise BackendUnavailableError(
                    f"cannot connect to {self.description} within "
                    f"{self.target.connect_timeout_s:g}s"
                ) from exc
        return pool

    async def arun(self, op: Op[T] | list[Stmt], *, write: bool, urgent: bool = True) -> T:
        """Async :meth:`run`, on this event loop's own pool."""
        pool = await self._apool()
        if not write:
            with self._wrap():
                async with (
                    pool.connection() as conn,
                    conn.pipeline(),
                    conn.transaction(),
                    conn.cursor(binary=True) as cur,
                ):
                    return await _adrive(cur, op)
        group = self._group
        if not urgent:
            result, position = await self._awrite(pool, op, urgent=False)
            if not await asyncio.to_thread(group.wait, position):
                group.advanced((await self._awrite(pool, _flush_op(), urgent=True))[1])
            return result
        group.urgent_begin()
        durable: int | None = None
        try:
            result, durable = await self._awrite(pool, op, urgent=True)
        finally:
            group.urgent_end(durable)
        return result

    async def _awrite(
        self, pool: AsyncConnectionPool, op: Op[T] | list[Stmt], *, urgent: bool
    ) -> tuple[T, int]:
        """Async :meth:`_write`."""
        with self._wrap():
            async with pool.connection() as conn:
                if isinstance(op, list):
                    return await self._abatch(conn, op, urgent)
                try:
                    async with (
                        conn.pipeline(),
                        conn.cursor(binary=True) as cur,
                        conn.cursor() as pos,
                    ):
                        await cur.execute(b"BEGIN")
                        if not urgent:
                            await cur.execute(_ASYNC_COMMIT)
                        result = await _adrive(cur, op)
                        if urgent and self._urgent_position is _INSERT_LSN:
                            await pos.execute(_INSERT_LSN)
                            await cur.execute(b"COMMIT")
                        else:
                            await cur.execute(b"COMMIT")
                            await pos.execute(self._urgent_position if urgent else _INSERT_LSN)
                        row = await pos.fetchone()
                except BaseException:
                    if conn.info.transaction_status != _IDLE:
                        await conn.rollback()
                    raise
        return result, int(row[0]) if row else 0

    def close(self) -> None:
        """Close the sync pool (async pools are closed by :meth:`aclose` on their loop)."""
        self._pool.close()

    async def aclose(self) -> None:
        """Close this loop's async pool and the sync pool."""
        loop = asyncio.get_running_loop()
        pool = self._apools.pop(loop, None)
        if pool is not None:
            await pool.close()
        try:
            await asyncio.to_thread(self._pool.close)
        except RuntimeError:  # the loop's executor is shut down (DBOS destroyed it)
            self._pool.close()


class _PgErrors:
    """Turn connection-level psycopg errors into :class:`BackendUnavailableError`."""

    def __init__(self, description: str) -> None:
        self.description = description

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            return
        import psycopg
        import psycopg_pool

        if isinstance(exc, psycopg_pool.PoolTimeout) or (
            isinstance(exc, psycopg.OperationalError)
            and (exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P", "53")))
        ):
            raise BackendUnavailableError(f"{self.description}: {exc}") from exc
