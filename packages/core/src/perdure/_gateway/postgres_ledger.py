"""The gateway's ledger in the PostgreSQL schema of a ``postgresql://`` store.

The store's pool of autocommit connections (``perdure._stores.postgres.open_pool``); a
claim is one ``INSERT ... ON CONFLICT DO NOTHING`` (the primary key decides which of two
concurrent gateways forwards a key). The tables are created under an advisory lock, as
the store creates its own, so gateways starting together do not race on the DDL.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from perdure._errors import BackendUnavailableError
from perdure._gateway.ledger import LedgerDb, Row, SqlSession
from perdure._gateway.ledger_sql import postgres
from perdure._stores.faults import postgres_error
from perdure._stores.postgres import (
    Conn,
    borrowed,
    connect_kwargs,
    describe_conninfo,
    open_pool,
    parse_postgres_url,
)


class _Session:
    def __init__(self, conn: Conn, statements: Mapping[str, bytes]) -> None:
        self._conn, self._q = conn, statements

    async def rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Row]:
        cur = await self._conn.execute(self._q[name], params)
        return await cur.fetchall() if cur.description else []

    async def many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        async with self._conn.cursor() as cur:
            await cur.executemany(self._q[name], params)


class PostgresLedgerDb(LedgerDb):
    def __init__(self, url: str) -> None:
        self._conninfo, self.schema, self.pool_size = parse_postgres_url(url)
        dialect = postgres(self.schema)
        self._q = {name: sql.encode() for name, sql in dialect.statements().items()}
        self._ddl = [f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"', *dialect.ddl()]
        self._kwargs = connect_kwargs(self._conninfo)
        self.where = f"{describe_conninfo(self._conninfo)} (gateway ledger, schema {self.schema!r})"
        self._pool: AsyncConnectionPool[Conn] | None = None

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
            async with conn, conn.transaction():
                await conn.execute(
                    b"SELECT pg_advisory_xact_lock(hashtext(%s))",
                    (f"perdure:{self.schema}:gateway",),
                )
                for statement in self._ddl:
                    await conn.execute(statement.encode())
        except psycopg.Error as exc:
            raise postgres_error(exc, self.where) from exc
        self._pool = await open_pool(
            self._conninfo,
            self._kwargs,
            self.pool_size,
            f"perdure-gateway:{self.schema}",
            self.where,
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def session(self, transaction: bool = False) -> AsyncGenerator[SqlSession, None]:
        if self._pool is None:
            raise BackendUnavailableError(f"{self.where} is not open")
        async with borrowed(self._pool, self.where) as conn:
            if transaction:
                async with conn.transaction():
                    yield _Session(conn, self._q)
            else:
                yield _Session(conn, self._q)
