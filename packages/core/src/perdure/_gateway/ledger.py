"""The gateway's ledger: attempts kept in the SQL database of perdure's store.

``open_ledger(url)`` takes any perdure URL; the ledger lives where adapters keep their
own tables (``perdure._registry.state_url``): the SQLite file or PostgreSQL schema of
the store itself, or the SQL database a Temporal or DBOS URL names. Two tables,
``gateway_attempts`` and, for bodies above ``INLINE_BODY`` bytes, ``gateway_bodies``.

One ``Ledger`` over either database: the SQL is written once (``ledger_sql``), and a
``LedgerDb`` (``sqlite_ledger``, ``postgres_ledger``) only connects and runs it. Every
write is one autocommit statement (two in one short transaction where a body is kept
aside) whose ``WHERE`` names the state and owner it expects, so two gateways sharing a
database never both forward a key, and a gateway that lost its claim cannot overwrite
what another recorded. A forwarded call costs two statements: its claim and its answer.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from perdure._errors import SubstrateError
from perdure._gateway.records import STATES, Attempt, State, StoredResponse

#: Bodies up to this size live in the attempt's row; larger ones in ``gateway_bodies``.
INLINE_BODY = 64 * 1024

Row = Sequence[Any]


class SqlSession(Protocol):
    """Runs the ledger's statements (``ledger_sql.STATEMENTS``) by name."""

    async def rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Row]: ...

    async def many(self, name: str, params: Sequence[Mapping[str, Any]]) -> None: ...


class LedgerDb(ABC):
    """A connection (or pool) to the ledger's database, its tables created on open."""

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    def session(self, transaction: bool = False) -> AbstractAsyncContextManager[SqlSession]:
        """Statements in autocommit, or in one transaction (rolled back if the body
        raises). Driver errors come out as perdure's typed errors."""


class _NotOurs(Exception):
    """Rolls back a transaction whose conditional write matched nothing."""


class Ledger:
    """Attempts by ``(scope, key)``; ``scope`` is the upstream (``NAME`` or ``mcp:NAME``)."""

    def __init__(self, db: LedgerDb) -> None:
        self.db = db

    async def open(self) -> None:
        """Connect and create the tables if they are missing."""
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, now: float, lease_until: float
    ) -> Attempt | None:
        """Record a new ``in_flight`` attempt owned by ``owner``: None if this call
        recorded it (forward it now), else the attempt already there."""
        params = {"scope": scope, "key": key, "fp": fingerprint, "owner": owner}
        params |= {"now": now, "until": lease_until}
        while True:
            async with self.db.session() as db:
                if await db.rows("claim", params):
                    return None
                found = await db.rows("get", params)
            if found:  # else forgotten or purged between the two statements: claim again
                return decode_row(found[0])

    async def finish(
        self,
        scope: str,
        key: str,
        owner: str,
        response: StoredResponse,
        now: float,
        expires_at: float,
    ) -> bool:
        """Store the answer of ``owner``'s in-flight attempt; False if it is not that."""
        body = response.body
        aside = body is not None and len(body) > INLINE_BODY
        params = {
            "scope": scope,
            "key": key,
            "owner": owner,
            "now": now,
            "status": response.status,
            "headers": encode_headers(response.headers),
            "body": None if aside else body,
            "size": response.body_size,
            "aside": aside,
            "expires": expires_at,
        }
        if not aside:
            async with self.db.session() as db:
                return bool(await db.rows("finish", params))
        try:
            async with self.db.session(transaction=True) as db:
                await db.rows("aside", {"scope": scope, "key": key, "body": body})
                if not await db.rows("finish", params):
                    raise _NotOurs  # undo the body written aside
        except _NotOurs:
            return False
        return True

    async def release(self, scope: str, key: str, owner: str) -> None:
        """Drop ``owner``'s in-flight attempt: the request provably never left."""
        async with self.db.session() as db:
            await db.rows("release", {"scope": scope, "key": key, "owner": owner})

    async def mark_unknown(self, scope: str, key: str, owner: str | None, reason: str) -> bool:
        """Turn the in-flight attempt of ``owner`` into ``unknown`` with ``reason``."""
        params = {"scope": scope, "key": key, "owner": owner, "reason": reason}
        async with self.db.session() as db:
            return bool(await db.rows("unknown", params))

    async def renew(self, owner: str, keys: Sequence[tuple[str, str]], lease_until: float) -> None:
        """Extend the lease of ``owner``'s in-flight attempts ``keys``."""
        if keys:
            params = [{"scope": s, "key": k, "owner": owner, "until": lease_until} for s, k in keys]
            async with self.db.session(transaction=True) as db:
                await db.many("renew", params)

    async def get(self, scope: str, key: str) -> Attempt | None:
        async with self.db.session() as db:
            found = await db.rows("get", {"scope": scope, "key": key})
        return decode_row(found[0]) if found else None

    async def attempts(
        self, states: Sequence[State] | None = None, limit: int = 100
    ) -> list[Attempt]:
        """Attempts (newest first), without their bodies."""
        wanted = list(states or STATES)
        params: dict[str, Any] = {f"state{i}": wanted[i % len(wanted)] for i in range(len(STATES))}
        async with self.db.session() as db:
            rows = await db.rows("list", params | {"limit": limit})
        return [decode_row(row) for row in rows]

    async def forget(self, scope: str, key: str) -> bool:
        """Delete an attempt (an operator resolved it): the next call is forwarded."""
        params = {"scope": scope, "key": key}
        async with self.db.session(transaction=True) as db:
            await db.rows("forget_body", params)
            return bool(await db.rows("forget", params))

    async def purge(self, now: float) -> int:
        """Delete answered attempts whose retention passed; how many."""
        async with self.db.session(transaction=True) as db:
            await db.rows("purge_bodies", {"now": now})
            return len(await db.rows("purge", {"now": now}))


def open_ledger(url: str) -> Ledger:
    """An unopened ledger in the SQL database of the perdure URL ``url``."""
    from perdure._registry import state_url

    sql = state_url(url)
    if sql.split("://", 1)[0].lower() == "sqlite":
        from perdure._gateway.sqlite_ledger import SqliteLedgerDb

        return Ledger(SqliteLedgerDb(sql))
    from perdure._gateway.postgres_ledger import PostgresLedgerDb

    return Ledger(PostgresLedgerDb(sql))


def encode_headers(headers: Sequence[tuple[str, str]]) -> str:
    return json.dumps([list(h) for h in headers], separators=(",", ":"))


def decode_row(row: Row) -> Attempt:
    """An attempt from a row of ``ledger_sql.COLUMNS`` and the body kept aside."""
    (scope, key, fp, state, owner, started, lease, finished) = row[:8]
    (status, headers, body, size, body_aside, reason, expires, aside) = row[8:]
    response = None
    if state == "done" and status is not None:
        pairs: list[list[str]] = json.loads(str(headers or "[]"))
        stored = body if not body_aside else aside
        response = StoredResponse(
            int(status),
            tuple((str(n), str(v)) for n, v in pairs),
            None if stored is None else bytes(stored),
            int(size or 0),
        )
    if state not in STATES:
        raise SubstrateError(f"gateway ledger: attempt {scope}/{key} has unknown state {state!r}")
    return Attempt(
        scope=str(scope),
        key=str(key),
        fingerprint=str(fp),
        state=state,
        owner=None if owner is None else str(owner),
        started_at=float(started),
        lease_until=None if lease is None else float(lease),
        finished_at=None if finished is None else float(finished),
        response=response,
        reason=None if reason is None else str(reason),
        expires_at=None if expires is None else float(expires),
    )
