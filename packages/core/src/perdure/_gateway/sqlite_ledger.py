"""The gateway's ledger in the SQLite file of a ``sqlite:///`` store.

One connection, opened as the store opens its own (``perdure._stores.sqlite.connect``:
WAL, the URL's ``synchronous`` level), used synchronously from the async methods as the
store does: a local commit costs less than a hop to a thread, and no statement awaits,
so coroutines sharing the connection never interleave inside a transaction.
Transactions are ``BEGIN IMMEDIATE``: gateways in several processes serialize on the
file's write lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from perdure._errors import BackendUnavailableError
from perdure._gateway.ledger import LedgerDb, Row, SqlSession
from perdure._gateway.ledger_sql import SQLITE
from perdure._stores.faults import sqlite_error
from perdure._stores.sqlite import connect, immediate, parse_sqlite_url

_STATEMENTS = SQLITE.statements()


class _Session:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Row]:
        return self._db.execute(_STATEMENTS[name], params).fetchall()

    async def many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None:
        self._db.executemany(_STATEMENTS[name], params)


def _create_tables(db: sqlite3.Connection) -> None:
    with immediate(db):
        for statement in SQLITE.ddl():
            db.execute(statement)


class SqliteLedgerDb(LedgerDb):
    def __init__(self, url: str) -> None:
        self.path, self.synchronous = parse_sqlite_url(url)
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        if self._db is not None:
            return
        self._db = connect(self.path, self.synchronous, _create_tables)

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    @asynccontextmanager
    async def session(self, transaction: bool = False) -> AsyncGenerator[SqlSession, None]:
        db = self._db
        if db is None:
            raise BackendUnavailableError(f"gateway ledger {self.path!r} is not open")
        try:
            if transaction:
                with immediate(db):
                    yield _Session(db)
            else:
                yield _Session(db)
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc
