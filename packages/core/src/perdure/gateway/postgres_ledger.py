"""The gateway's ledger in the PostgreSQL schema of a ``postgresql://`` store.

A pool of autocommit connections; a claim is one ``INSERT ... ON CONFLICT DO NOTHING``
(the primary key decides which of two concurrent gateways forwards a key), every other
write one conditional statement. The tables are created under an advisory lock, as the
store creates its own, so gateways starting together do not race on the DDL.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from perdure.errors import BackendUnavailableError
from perdure.gateway.ledger import COLUMNS, INLINE_BODY, Ledger, decode_row, encode_headers
from perdure.gateway.records import Attempt, State, StoredResponse
from perdure.stores.faults import postgres_error
from perdure.stores.postgres import describe_conninfo, parse_postgres_url

Conn = psycopg.AsyncConnection[TupleRow]

_SCHEMA = (
    'CREATE SCHEMA IF NOT EXISTS "{schema}"',
    """CREATE TABLE IF NOT EXISTS {s}gateway_attempts (
        scope text NOT NULL,
        key text NOT NULL,
        fingerprint text NOT NULL,
        state text NOT NULL,
        owner text,
        started_at double precision NOT NULL,
        lease_until double precision,
        finished_at double precision,
        status integer,
        headers text,
        body bytea,
        body_size bigint,
        body_aside boolean NOT NULL DEFAULT false,
        reason text,
        expires_at double precision,
        PRIMARY KEY (scope, key)
    )""",
    "CREATE INDEX IF NOT EXISTS gateway_attempts_expiry ON {s}gateway_attempts (expires_at)",
    """CREATE TABLE IF NOT EXISTS {s}gateway_bodies (
        scope text NOT NULL,
        key text NOT NULL,
        body bytea NOT NULL,
        PRIMARY KEY (scope, key)
    )""",
)

_TEMPLATES = {
    "claim": """INSERT INTO {s}gateway_attempts
        (scope, key, fingerprint, state, owner, started_at, lease_until)
        VALUES (%(scope)s, %(key)s, %(fp)s, 'in_flight', %(owner)s, %(now)s, %(until)s)
        ON CONFLICT (scope, key) DO NOTHING RETURNING 1""",
    "get": f"SELECT {COLUMNS} FROM {{s}}gateway_attempts WHERE scope = %(scope)s AND key = %(key)s",
    "body": "SELECT body FROM {s}gateway_bodies WHERE scope = %(scope)s AND key = %(key)s",
    "finish": """UPDATE {s}gateway_attempts SET state = 'done', owner = NULL,
        lease_until = NULL, finished_at = %(now)s, status = %(status)s, headers = %(headers)s,
        body = %(body)s, body_size = %(size)s, body_aside = %(aside)s, expires_at = %(expires)s
        WHERE scope = %(scope)s AND key = %(key)s AND state = 'in_flight' AND owner = %(owner)s
        RETURNING 1""",
    "aside": """INSERT INTO {s}gateway_bodies (scope, key, body)
        VALUES (%(scope)s, %(key)s, %(body)s)
        ON CONFLICT (scope, key) DO UPDATE SET body = EXCLUDED.body""",
    "release": """DELETE FROM {s}gateway_attempts WHERE scope = %(scope)s AND key = %(key)s
        AND state = 'in_flight' AND owner = %(owner)s""",
    "unknown": """UPDATE {s}gateway_attempts SET state = 'unknown', lease_until = NULL,
        reason = %(reason)s
        WHERE scope = %(scope)s AND key = %(key)s AND state = 'in_flight'
        AND owner IS NOT DISTINCT FROM %(owner)s RETURNING 1""",
    "renew": """UPDATE {s}gateway_attempts SET lease_until = %(until)s
        WHERE owner = %(owner)s AND state = 'in_flight'
        AND (scope, key) IN (SELECT * FROM unnest(%(scopes)s::text[], %(keys)s::text[]))""",
    "forget": """WITH body AS (
            DELETE FROM {s}gateway_bodies WHERE scope = %(scope)s AND key = %(key)s)
        DELETE FROM {s}gateway_attempts WHERE scope = %(scope)s AND key = %(key)s RETURNING 1""",
    "purge": """WITH gone AS (
            DELETE FROM {s}gateway_attempts WHERE state = 'done' AND expires_at < %(now)s
            RETURNING scope, key),
        bodies AS (DELETE FROM {s}gateway_bodies b USING gone
            WHERE b.scope = gone.scope AND b.key = gone.key)
        SELECT count(*) FROM gone""",
    "list": f"""SELECT {COLUMNS} FROM {{s}}gateway_attempts
        WHERE %(states)s::text[] IS NULL OR state = ANY(%(states)s::text[])
        ORDER BY started_at DESC LIMIT %(limit)s""",
}


class PostgresLedger(Ledger):
    def __init__(self, url: str, pool_size: int = 10) -> None:
        self._conninfo, self.schema, self.pool_size = parse_postgres_url(url)
        prefix = f'"{self.schema}".'
        self._q = {k: v.replace("{s}", prefix).encode() for k, v in _TEMPLATES.items()}
        self._schema = [
            s.replace("{schema}", self.schema).replace("{s}", prefix).encode() for s in _SCHEMA
        ]
        self._pool: AsyncConnectionPool[Conn] | None = None

    def _where(self) -> str:
        return f"{describe_conninfo(self._conninfo)} (gateway ledger, schema {self.schema!r})"

    async def open(self) -> None:
        if self._pool is not None:
            return
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 5}
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **kwargs)
            async with conn, conn.transaction():
                await conn.execute(
                    b"SELECT pg_advisory_xact_lock(hashtext(%s))",
                    (f"perdure:{self.schema}:gateway",),
                )
                for statement in self._schema:
                    await conn.execute(statement)
        except psycopg.Error as exc:
            raise postgres_error(exc, self._where()) from exc
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            kwargs=kwargs,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            timeout=10.0,
            name=f"perdure-gateway:{self.schema}",
        )
        try:
            await pool.open(wait=True, timeout=10.0)
        except PoolTimeout as exc:
            await pool.close()
            raise postgres_error(exc, self._where()) from exc
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def _conn(self) -> AsyncGenerator[Conn, None]:
        pool = self._pool
        if pool is None:
            raise BackendUnavailableError(f"{self._where()} is not open")
        try:
            conn = await pool.getconn()
        except PoolTimeout as exc:
            raise postgres_error(exc, self._where()) from exc
        try:
            yield conn
        except psycopg.Error as exc:
            raise postgres_error(exc, self._where()) from exc
        finally:
            await pool.putconn(conn)

    async def _rows(self, name: str, params: dict[str, Any]) -> list[TupleRow]:
        async with self._conn() as conn:
            cur = await conn.execute(self._q[name], params)
            return await cur.fetchall() if cur.description else []

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, now: float, lease_until: float
    ) -> Attempt | None:
        params = {"scope": scope, "key": key, "fp": fingerprint, "owner": owner}
        if await self._rows("claim", {**params, "now": now, "until": lease_until}):
            return None
        found = await self.get(scope, key)
        if found is None:  # forgotten or purged between the two statements: a fresh claim
            return await self.claim(scope, key, fingerprint, owner, now, lease_until)
        return found

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
        params = {"scope": scope, "key": key, "owner": owner}
        async with self._conn() as conn, conn.transaction():
            if aside:
                await conn.execute(self._q["aside"], {**params, "body": body})
            cur = await conn.execute(
                self._q["finish"],
                {
                    **params,
                    "now": now,
                    "status": response.status,
                    "headers": encode_headers(response.headers),
                    "body": None if aside else body,
                    "size": response.body_size,
                    "aside": aside,
                    "expires": expires_at,
                },
            )
            done = await cur.fetchone() is not None
            if not done and aside:
                raise psycopg.Rollback  # not ours to answer: undo the body written aside
        return done

    async def release(self, scope: str, key: str, owner: str) -> None:
        await self._rows("release", {"scope": scope, "key": key, "owner": owner})

    async def mark_unknown(self, scope: str, key: str, owner: str | None, reason: str) -> bool:
        params = {"scope": scope, "key": key, "owner": owner, "reason": reason}
        return bool(await self._rows("unknown", params))

    async def renew(self, owner: str, keys: Sequence[tuple[str, str]], lease_until: float) -> None:
        if keys:
            scopes, names = [s for s, _ in keys], [k for _, k in keys]
            params = {"owner": owner, "until": lease_until, "scopes": scopes, "keys": names}
            await self._rows("renew", params)

    async def get(self, scope: str, key: str) -> Attempt | None:
        params = {"scope": scope, "key": key}
        rows = await self._rows("get", params)
        if not rows:
            return None
        aside = None
        if rows[0][12]:
            found = await self._rows("body", params)
            aside = bytes(found[0][0]) if found else None
        return decode_row(rows[0], aside)

    async def attempts(
        self, states: Sequence[State] | None = None, limit: int = 100
    ) -> list[Attempt]:
        rows = await self._rows(
            "list", {"states": list(states) if states else None, "limit": limit}
        )
        return [decode_row(row) for row in rows]

    async def forget(self, scope: str, key: str) -> bool:
        return bool(await self._rows("forget", {"scope": scope, "key": key}))

    async def purge(self, now: float) -> int:
        rows = await self._rows("purge", {"now": now})
        return int(rows[0][0]) if rows else 0
