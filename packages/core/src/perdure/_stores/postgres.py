"""The embedded engine on PostgreSQL: psycopg 3 with a pool of autocommit connections.

The hot path, ``append`` of a step, is one statement and one round trip: a
data-modifying CTE updates the run row only while the caller's fence is current and
inserts the events only if that update matched, so a stale worker writes nothing.
Operations that must read what concurrent transactions committed (a suspension that
looks for an already delivered signal, the next sequence number after taking a run)
issue that read as a later statement, after the run row is locked or taken: under
READ COMMITTED a later statement sees every commit that happened before it.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from perdure._errors import (
    BackendUnavailableError,
    ConfigurationError,
    LeaseLostError,
    RunNotFoundError,
    SubstrateError,
)
from perdure._records import Event, EventKind, NewEvent, RunInfo, RunStatus, SignalRecord
from perdure._semantics import approvals, guards
from perdure._store import Lease, NewRun, RunUpdate, Store
from perdure._stores.faults import postgres_error
from perdure._stores.migrations import (
    CLAIMABLE_SQL,
    EVENT_COLUMNS,
    LATEST_VERSION,
    POSTGRES_MIGRATIONS,
    SIGNAL_COLUMNS,
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

Conn = psycopg.AsyncConnection[TupleRow]

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_CONNECT_TIMEOUT = 5
_POOL_OPEN_TIMEOUT = 10.0
#: How long a call waits for a pooled connection before it counts as an outage.
_POOL_TIMEOUT = 10.0

# Statement templates; ``{s}`` becomes the quoted schema and a dot.
_DUE = f"""status IN {CLAIMABLE_SQL}
    AND (status <> 'suspended' OR wake_at <= %(now)s)
    AND (owner IS NULL OR COALESCE(lease_until, 0) < %(now)s OR owner = %(brk)s)"""
_TAKE = """UPDATE {s}runs SET fence = fence + 1, owner = %(owner)s, lease_until = %(until)s,
    status = 'running', wake_at = NULL, waiting_for = NULL"""
# Several events travel as arrays in binary form (no quoting of JSON text); one event,
# the common case, as plain parameters, which PostgreSQL executes measurably faster.
_EVENTS_FROM_ARRAYS = """unnest(%(seqs)b::bigint[], %(kinds)b::text[], %(keys)b::text[],
    %(names)b::text[], %(datas)b::text[]) AS e (seq, kind, step_key, name, data)"""
_INSERT_EVENTS = f"""INSERT INTO {{s}}events ({EVENT_COLUMNS})
    SELECT %(run_id)s, e.seq, e.kind, e.step_key, e.name, e.data, %(now)s
    FROM {_EVENTS_FROM_ARRAYS}"""
_EXTEND_SET = "lease_until = %(until)s, updated_at = %(now)s"
_FINISH_SET = """status = %(status)s, result = %(result)s, error = %(error)s,
    waiting_for = %(waiting_for)s, wake_at = %(wake_at)s, attention = %(attention)s,
    owner = NULL, lease_until = NULL, updated_at = %(now)s"""


def _append_sql(finish: bool, consume: bool, events: str) -> str:
    """The one-statement fenced append: no row back means the fence was stale.

    ``events`` is ``none``, ``one`` or ``many``; the events and the consumed signal are
    written only if the fenced update of the run matched (they join ``upd``).
    """
    ins = {
        "none": "",
        "one": f""", ins AS (
            INSERT INTO {{s}}events ({EVENT_COLUMNS})
            SELECT %(run_id)s, %(seq)s, %(kind)s, %(key)s, %(name)s, %(data)s, %(now)s
            FROM upd)""",
        "many": f""", ins AS (
            INSERT INTO {{s}}events ({EVENT_COLUMNS})
            SELECT %(run_id)s, e.seq, e.kind, e.step_key, e.name, e.data, %(now)s
            FROM upd, {_EVENTS_FROM_ARRAYS})""",
    }[events]
    con = (
        ", con AS (UPDATE {s}signals SET consumed = true FROM upd WHERE id = %(signal)s)"
        if consume
        else ""
    )
    return f"""WITH upd AS (
        UPDATE {{s}}runs SET {_FINISH_SET if finish else _EXTEND_SET}
        WHERE run_id = %(run_id)s AND fence = %(fence)s AND owner = %(owner)s
        RETURNING cancel_requested
    ){ins}{con}
    SELECT cancel_requested FROM upd"""


_RUN = run_columns("{s}runs", "{s}events")

_TEMPLATES: dict[str, str] = {
    # events has no foreign key (it would slow every append); signals cascade
    "delete_finished": """WITH gone AS (
        DELETE FROM {s}runs WHERE run_id = ANY(%(run_ids)s)
        AND status IN ('succeeded', 'failed', 'cancelled') RETURNING run_id
    ), history AS (DELETE FROM {s}events WHERE run_id IN (SELECT run_id FROM gone))
    SELECT run_id FROM gone""",
    "select_run": f"SELECT {_RUN} FROM {{s}}runs WHERE run_id = %(run_id)s",
    "status": "SELECT status FROM {s}runs WHERE run_id = %(run_id)s",
    "create": f"""WITH ins AS (
        INSERT INTO {{s}}runs (run_id, workflow, status, code_version, owner,
            lease_until, fence, parent_run_id, details, created_at, updated_at)
        VALUES (%(run_id)s, %(workflow)s, 'running', %(code_version)s, %(owner)s,
            %(until)s, 1, %(parent)s, %(details)s, %(now)s, %(now)s)
        ON CONFLICT (run_id) DO NOTHING
        RETURNING run_id
    ), ev AS (
        INSERT INTO {{s}}events ({EVENT_COLUMNS})
        SELECT run_id, 0, '{EventKind.RUN_STARTED.value}', NULL, NULL, %(input)s, %(now)s FROM ins
    )
    SELECT run_id FROM ins""",
    "history": f"SELECT {EVENT_COLUMNS} FROM {{s}}events WHERE run_id = %(run_id)s ORDER BY seq",
    **{
        f"append_{kind}_{events}{'_consume' if consume else ''}": _append_sql(
            kind == "finish", consume, events
        )
        for kind in ("extend", "finish")
        for events in ("none", "one", "many")
        for consume in (False, True)
    },
    "wake_if_signalled": """UPDATE {s}runs SET wake_at = %(now)s
        WHERE run_id = %(run_id)s AND EXISTS (
            SELECT 1 FROM {s}signals
            WHERE run_id = %(run_id)s AND name = %(name)s AND NOT consumed)""",
    "next_seq": """SELECT run_id, MAX(seq) + 1 FROM {s}events
        WHERE run_id = ANY(%(run_ids)s) GROUP BY run_id""",
    "acquire": f"{_TAKE} WHERE run_id = %(run_id)s AND {_DUE} RETURNING fence, cancel_requested",
    "claim": f"""WITH due AS (
        SELECT run_id FROM {{s}}runs
        WHERE workflow = ANY(%(workflows)s) AND {_DUE}
        ORDER BY updated_at, run_id LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    {_TAKE} FROM due WHERE {{s}}runs.run_id = due.run_id
    RETURNING {{s}}runs.run_id, fence, cancel_requested, updated_at""",
    "next_wake": """SELECT MIN(wake_at) FROM {s}runs
        WHERE status = 'suspended' AND workflow = ANY(%(workflows)s)""",
    "renew": "UPDATE {s}runs SET lease_until = %(until)s WHERE owner = %(owner)s",
    "release": """UPDATE {s}runs SET owner = NULL, lease_until = NULL
        WHERE run_id = %(run_id)s AND fence = %(fence)s AND owner = %(owner)s""",
    "lock_run": """SELECT status, waiting_for FROM {s}runs WHERE run_id = %(run_id)s
        FOR UPDATE""",
    "insert_signal": """INSERT INTO {s}signals (run_id, name, payload, sent_by, sent_at,
        decision) VALUES (%(run_id)s, %(name)s, %(payload)s, %(sent_by)s, %(now)s,
        %(decision)s) RETURNING id""",
    "wake": "UPDATE {s}runs SET wake_at = %(now)s WHERE run_id = %(run_id)s",
    "answer": """UPDATE {s}runs SET wake_at = %(now)s, waiting_for = NULL, attention = NULL
        WHERE run_id = %(run_id)s""",
    "next_signal": f"""SELECT {SIGNAL_COLUMNS} FROM {{s}}signals
        WHERE run_id = %(run_id)s AND name = %(name)s AND NOT consumed ORDER BY id LIMIT 1""",
    "cancel": f"""UPDATE {{s}}runs SET cancel_requested = true,
        wake_at = CASE WHEN status IN ('suspended', 'needs-attention')
            THEN %(now)s ELSE wake_at END,
        status = CASE WHEN status IN ('suspended', 'needs-attention')
            THEN 'suspended' ELSE status END
        WHERE run_id = %(run_id)s RETURNING {_RUN}""",
    "insert_events": _INSERT_EVENTS,
    "admin_update": f"""UPDATE {{s}}runs SET status = %(status)s, attention = NULL,
        wake_at = %(now)s, updated_at = %(now)s
        WHERE run_id = %(run_id)s RETURNING {_RUN}""",
}


def parse_postgres_url(url: str) -> tuple[str, str, int]:
    """The libpq conninfo, schema and pool size a ``postgresql://`` URL names.

    perdure's own options, ``?schema=`` (default ``perdure``) and ``?pool_size=``
    (default 10), are removed; every other option is passed on to libpq.
    """
    parts = split_url(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(f"{url!r} is not a postgresql:// URL")
    schema, pool_size = "perdure", 10
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            if not _SCHEMA_NAME.fullmatch(value):
                raise ConfigurationError(f"{url!r}: schema={value!r} is not a plain SQL identifier")
            schema = value
        elif key == "pool_size":
            try:
                pool_size = int(value)
            except ValueError:
                pool_size = 0
            if pool_size < 1:
                raise ConfigurationError(f"{url!r}: pool_size={value!r} is not a positive int")
        else:
            rest.append((key, value))
    # libpq percent-decodes URIs but reads ``+`` literally: quote spaces as %20.
    conninfo = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"{url!r} is not a valid PostgreSQL URL: {exc}") from None
    return conninfo, schema, pool_size


def describe_conninfo(conninfo: str) -> str:
    """``host:port/dbname`` for messages; never the password."""
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or 5432)
    return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"


def connect_kwargs(conninfo: str) -> dict[str, Any]:
    """psycopg connection options: autocommit, and a connect timeout unless the URL
    sets one."""
    kwargs: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in conninfo_to_dict(conninfo):
        kwargs["connect_timeout"] = _CONNECT_TIMEOUT
    return kwargs


async def open_pool(
    conninfo: str, kwargs: dict[str, Any], size: int, name: str, where: str
) -> AsyncConnectionPool[Conn]:
    """An open pool of up to ``size`` connections; an unreachable server is a typed error
    naming ``where``."""
    pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
        conninfo,
        kwargs=kwargs,
        min_size=1,
        max_size=size,
        open=False,
        timeout=_POOL_TIMEOUT,
        name=name,
    )
    try:
        await pool.open(wait=True, timeout=_POOL_OPEN_TIMEOUT)
    except PoolTimeout as exc:
        await pool.close()
        raise postgres_error(exc, where) from exc
    return pool


@asynccontextmanager
async def borrowed(pool: AsyncConnectionPool[Conn], where: str) -> AsyncGenerator[Conn, None]:
    """A connection of ``pool`` for one call; driver errors become typed ones naming
    ``where`` (an integrity error passes: the caller knows what its race means)."""
    # getconn/putconn rather than pool.connection(): the connections are autocommit,
    # so its commit-on-exit has nothing to do, and skipping it halves the pool's cost.
    try:
        conn = await pool.getconn()
    except PoolTimeout as exc:
        raise postgres_error(exc, where) from exc
    try:
        yield conn
    except psycopg.IntegrityError:
        raise
    except psycopg.Error as exc:
        raise postgres_error(exc, where) from exc
    finally:
        await pool.putconn(conn)  # rolls back a transaction left open by an error


class PostgresStore(Store):
    """Runs, histories and inboxes in one PostgreSQL schema."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conninfo, self.schema, self.pool_size = parse_postgres_url(url)
        self.where = describe_conninfo(self._conninfo)
        self._kwargs = connect_kwargs(self._conninfo)
        prefix = f'"{self.schema}".'
        self._q = {k: v.replace("{s}", prefix).encode() for k, v in _TEMPLATES.items()}
        self._run = _RUN.replace("{s}", prefix)
        self._pool: AsyncConnectionPool[Conn] | None = None

    # ------------------------------------------------------------ connection

    def _unavailable(self, exc: Exception) -> BackendUnavailableError | SubstrateError:
        return postgres_error(exc, self.where)

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
        except psycopg.Error as exc:
            raise self._unavailable(exc) from exc
        try:
            async with conn:
                await self._migrate(conn)
        except psycopg.Error as exc:  # also a missing privilege: name the schema
            raise postgres_error(
                exc, f"{self.where}, bringing schema {self.schema!r} up to date"
            ) from exc
        self._pool = await open_pool(
            self._conninfo, self._kwargs, self.pool_size, f"perdure:{self.schema}", self.where
        )

    async def _migrate(self, conn: Conn) -> None:
        table = f'"{self.schema}".perdure_migrations'
        if await self._version(conn, table) >= LATEST_VERSION:
            return  # the common case takes no lock and needs no CREATE privilege
        prefix = f'"{self.schema}".'
        async with conn.transaction():
            # Serializes concurrent first opens of one schema (workers starting together).
            await conn.execute(
                b"SELECT pg_advisory_xact_lock(hashtext(%s))", (f"perdure:{self.schema}",)
            )
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'.encode())
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (version integer PRIMARY KEY, "
                "applied_at double precision NOT NULL)".encode()
            )
            done = await self._version(conn, table)
            for migration in POSTGRES_MIGRATIONS:
                if migration.version > done:
                    for statement in migration.statements:
                        await conn.execute(statement.replace("{s}", prefix).encode())
                    await conn.execute(
                        f"INSERT INTO {table} (version, applied_at) VALUES (%s, %s)".encode(),
                        (migration.version, time.time()),
                    )

    @staticmethod
    async def _version(conn: Conn, table: str) -> int:
        cur = await conn.execute(b"SELECT to_regclass(%s) IS NOT NULL", (table,))
        row = await cur.fetchone()
        if row is None or not row[0]:
            return 0
        cur = await conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {table}".encode())
        row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def _conn(self) -> AsyncGenerator[Conn, None]:
        if self._pool is None:
            raise BackendUnavailableError(f"PostgreSQL store at {self.where} is not open")
        async with borrowed(self._pool, self.where) as conn:
            yield conn

    async def _all(self, conn: Conn, name: str, params: dict[str, Any]) -> list[TupleRow]:
        cur = await conn.execute(self._q[name], params)
        return await cur.fetchall()

    async def _status(self, conn: Conn, run_id: str) -> RunStatus:
        rows = await self._all(conn, "status", {"run_id": run_id})
        if not rows:
            raise RunNotFoundError(run_id)
        return status_of(rows[0][0], run_id)

    async def _next_seqs(self, conn: Conn, run_ids: list[str]) -> dict[str, int]:
        rows = await self._all(conn, "next_seq", {"run_ids": run_ids})
        return {str(r[0]): int(r[1]) for r in rows}

    @staticmethod
    def _events(
        first_seq: int, events: Sequence[NewEvent], run_id: str, arrays: bool = False
    ) -> dict[str, Any]:
        """Parameters for ``_append_sql``: one event's fields, or arrays of several."""
        if len(events) == 1 and not arrays:
            ev = events[0]
            return {
                "seq": first_seq,
                "kind": ev.kind.value,
                "key": ev.step_key,
                "name": ev.name,
                "data": encode_event(ev, run_id, first_seq),
            }
        return {
            "seqs": list(range(first_seq, first_seq + len(events))),
            "kinds": [ev.kind.value for ev in events],
            "keys": [ev.step_key for ev in events],
            "names": [ev.name for ev in events],
            "datas": [encode_event(ev, run_id, seq) for seq, ev in enumerate(events, first_seq)],
        }

    # ------------------------------------------------------------ runs

    async def create_run(
        self, new: NewRun, owner: str, lease_seconds: float
    ) -> tuple[RunInfo, Lease | None]:
        now = time.time()
        input_text = encode(new.input, f"input of run {new.run_id!r}")
        details_text = encode(new.details, f"details of run {new.run_id!r}")
        params: dict[str, Any] = {
            "run_id": new.run_id,
            "workflow": new.workflow,
            "input": input_text,
            "code_version": new.code_version,
            "owner": owner,
            "until": now + lease_seconds,
            "parent": new.parent_run_id,
            "details": details_text,
            "now": now,
        }
        async with self._conn() as conn:
            if not await self._all(conn, "create", params):
                rows = await self._all(conn, "select_run", params)
                if not rows:  # pragma: no cover - runs are never deleted by perdure
                    raise RunNotFoundError(new.run_id)
                return decode_run(rows[0]), None
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
        async with self._conn() as conn:
            rows = await self._all(conn, "select_run", {"run_id": run_id})
        if not rows:
            raise RunNotFoundError(run_id)
        return decode_run(rows[0])

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        updated_before: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        where = ["true"]
        params: dict[str, Any] = {"limit": max(limit, 0)}
        if statuses is not None:
            where.append("status = ANY(%(statuses)s::text[])")
            params["statuses"] = [RunStatus(s).value for s in statuses]
        if updated_before is not None:
            where.append("updated_at < %(updated_before)s")
            params["updated_before"] = updated_before
        if workflow is not None:
            where.append("workflow = %(workflow)s")
            params["workflow"] = workflow
        sql = (
            f'SELECT {self._run} FROM "{self.schema}".runs WHERE {" AND ".join(where)} '
            "ORDER BY created_at DESC, run_id LIMIT %(limit)s"
        )
        async with self._conn() as conn:
            cur = await conn.execute(sql.encode(), params)
            rows = await cur.fetchall()
        return [listed_run(row) for row in rows]

    async def load_history(self, run_id: str) -> list[Event]:
        async with self._conn() as conn:
            rows = await self._all(conn, "history", {"run_id": run_id})
            if not rows:
                await self._status(conn, run_id)  # every run has run_started: tell why
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
        params = self._events(lease.next_seq, events, run_id)
        params.update(
            run_id=run_id, fence=lease.fence, owner=lease.owner, now=now, signal=consume_signal
        )
        count = "none" if not events else "one" if len(events) == 1 else "many"
        if update is None:
            name = f"append_extend_{count}"
            params["until"] = now + lease_seconds
        else:
            name = f"append_finish_{count}"
            params.update(
                status=update.status.value,
                result=encode(update.result, f"result of run {run_id!r}"),
                error=encode(update.error, f"error of run {run_id!r}"),
                waiting_for=update.waiting_for,
                wake_at=update.wake_at,
                attention=encode(update.attention, f"attention of run {run_id!r}"),
            )
        if consume_signal is not None:
            name += "_consume"
        awaited = (
            update.waiting_for
            if update is not None and update.status is RunStatus.SUSPENDED
            else None
        )
        try:
            async with self._conn() as conn:
                if awaited is None:
                    fenced = await self._all(conn, name, params)  # one round trip, atomic
                else:
                    async with conn.transaction():
                        fenced = await self._all(conn, name, params)
                        if fenced:
                            # A separate statement, run after the row is locked, sees any
                            # signal delivered up to now: deliver_signal locks it first.
                            params["name"] = awaited
                            await conn.execute(self._q["wake_if_signalled"], params)
        except psycopg.errors.UniqueViolation as exc:
            raise LeaseLostError(
                f"run {run_id!r}: event #{lease.next_seq} is already recorded, so this "
                f"lease's view of the history is stale; nothing was written ({exc})"
            ) from exc
        if not fenced:
            raise LeaseLostError(
                f"run {run_id!r}: the lease of {lease.owner} (fence {lease.fence}) "
                "was taken over; nothing was written"
            )
        lease.next_seq += len(events)
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
        async with self._conn() as conn:
            taken = await self._all(conn, "acquire", params)
            if not taken:
                await self._status(conn, run_id)  # RunNotFoundError if there is no such run
                return None
            # Read after the take committed: the old owner's last events are all in.
            seqs = await self._next_seqs(conn, [run_id])
        fence, cancel = taken[0]
        return Lease(run_id, owner, int(fence), seqs.get(run_id, 0), bool(cancel))

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
            "workflows": list(workflows),
            "limit": limit,
        }
        async with self._conn() as conn:
            taken = await self._all(conn, "claim", params)
            if not taken:
                return []
            seqs = await self._next_seqs(conn, [str(r[0]) for r in taken])
        taken.sort(key=lambda r: (r[3], r[0]))
        return [
            Lease(str(run_id), owner, int(fence), seqs.get(str(run_id), 0), bool(cancel))
            for run_id, fence, cancel, _ in taken
        ]

    async def next_wake(self, workflows: Sequence[str]) -> float | None:
        async with self._conn() as conn:
            rows = await self._all(conn, "next_wake", {"workflows": list(workflows)})
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    async def renew(self, owner: str, lease_seconds: float, *, now: float) -> None:
        async with self._conn() as conn:
            await conn.execute(self._q["renew"], {"owner": owner, "until": now + lease_seconds})

    async def release(self, lease: Lease) -> None:
        params = {"run_id": lease.run_id, "fence": lease.fence, "owner": lease.owner}
        async with self._conn() as conn:
            cur = await conn.execute(self._q["release"], params)
            if cur.rowcount == 0:
                await self._status(conn, lease.run_id)

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
        params = {
            "run_id": run_id,
            "name": name,
            "sent_by": sent_by,
            "now": now,
            "payload": encode(payload, f"payload of signal {name!r} to run {run_id!r}"),
            "decision": encode(authorization, f"decision on signal {name!r} to run {run_id!r}"),
        }
        async with self._conn() as conn, conn.transaction():
            # Lock the run first, so a concurrent suspension either commits before us
            # (we see it suspended and wake it) or runs its inbox check after our commit.
            rows = await self._all(conn, "lock_run", params)
            if not rows:
                raise RunNotFoundError(run_id)
            status = status_of(rows[0][0], run_id)
            answer = approvals.is_approval(name)
            if answer:
                # Checked and answered under the row lock: a second answer sees it answered.
                name = params["name"] = approvals.answer_channel(run_id, status, rows[0][1], name)
            else:
                guards.check_can_signal(run_id, status)
            signal_id = (await self._all(conn, "insert_signal", params))[0][0]
            if answer:
                await conn.execute(self._q["answer"], params)
            elif status is RunStatus.SUSPENDED and rows[0][1] == name:
                await conn.execute(self._q["wake"], params)
        return decode_signal(
            (signal_id, run_id, name, params["payload"], sent_by, now, params["decision"])
        )

    async def next_signal(self, run_id: str, name: str) -> SignalRecord | None:
        async with self._conn() as conn:
            rows = await self._all(conn, "next_signal", {"run_id": run_id, "name": name})
        return decode_signal(rows[0]) if rows else None

    async def request_cancel(self, run_id: str, *, now: float) -> RunInfo:
        params = {"run_id": run_id, "now": now}
        async with self._conn() as conn, conn.transaction():
            # The run is locked, so the guard and the write see the same status.
            rows = await self._all(conn, "lock_run", params)
            if not rows:
                raise RunNotFoundError(run_id)
            guards.check_can_cancel(run_id, status_of(rows[0][0], run_id))
            return decode_run((await self._all(conn, "cancel", params))[0])

    async def admin_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expect: Sequence[RunStatus],
        status: RunStatus,
        now: float,
    ) -> RunInfo:
        params: dict[str, Any] = {"run_id": run_id, "now": now, "status": status.value}
        async with self._conn() as conn, conn.transaction():
            rows = await self._all(conn, "lock_run", params)
            if not rows:
                raise RunNotFoundError(run_id)
            guards.check_expected(run_id, status_of(rows[0][0], run_id), expect)
            if events:
                first = (await self._next_seqs(conn, [run_id])).get(run_id, 0)
                params.update(self._events(first, events, run_id, arrays=True))
                await conn.execute(self._q["insert_events"], params)
            row = (await self._all(conn, "admin_update", params))[0]
        return decode_run(row)

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        if not run_ids:
            return []
        async with self._conn() as conn, conn.transaction():
            rows = await self._all(conn, "delete_finished", {"run_ids": list(run_ids)})
        return [str(row[0]) for row in rows]


def open_backend(url: str) -> EmbeddedBackend:
    """The embedded engine on the PostgreSQL database ``url`` names."""
    from perdure._engine.backend import EmbeddedBackend

    return EmbeddedBackend(PostgresStore(url))
