"""The gateway's ledger: attempts kept in the SQL database of perdure's store.

``open_ledger(url)`` takes any perdure URL; the ledger lives where adapters keep their
own tables (``perdure.registry.state_url``): the SQLite file or PostgreSQL schema of
the store itself, or the SQL database a Temporal or DBOS URL names. Two tables,
``gateway_attempts`` and, for bodies above ``INLINE_BODY`` bytes, ``gateway_bodies``.

Every write is one statement (or one short transaction) whose ``WHERE`` names the
state and owner it expects, so two gateways sharing a database never both forward a
key, and a gateway that lost its claim cannot overwrite what another recorded.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from perdure.errors import SubstrateError
from perdure.gateway.records import STATES, Attempt, State, StoredResponse

#: Bodies up to this size live in the attempt's row; larger ones in ``gateway_bodies``.
INLINE_BODY = 64 * 1024


class Ledger(ABC):
    """Attempts by ``(scope, key)``; ``scope`` is the upstream (``NAME`` or ``mcp:NAME``)."""

    @abstractmethod
    async def open(self) -> None:
        """Connect and create the tables if they are missing."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, now: float, lease_until: float
    ) -> Attempt | None:
        """Record a new ``in_flight`` attempt owned by ``owner``: None if this call
        recorded it (forward it now), else the attempt already there."""

    @abstractmethod
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

    @abstractmethod
    async def release(self, scope: str, key: str, owner: str) -> None:
        """Drop ``owner``'s in-flight attempt: the request provably never left."""

    @abstractmethod
    async def mark_unknown(self, scope: str, key: str, owner: str | None, reason: str) -> bool:
        """Turn the in-flight attempt of ``owner`` into ``unknown`` with ``reason``."""

    @abstractmethod
    async def renew(self, owner: str, keys: Sequence[tuple[str, str]], lease_until: float) -> None:
        """Extend the lease of ``owner``'s in-flight attempts ``keys``."""

    @abstractmethod
    async def get(self, scope: str, key: str) -> Attempt | None: ...

    @abstractmethod
    async def attempts(
        self, states: Sequence[State] | None = None, limit: int = 100
    ) -> list[Attempt]:
        """Attempts (newest first), without their bodies."""

    @abstractmethod
    async def forget(self, scope: str, key: str) -> bool:
        """Delete an attempt (an operator resolved it): the next call is forwarded."""

    @abstractmethod
    async def purge(self, now: float) -> int:
        """Delete answered attempts whose retention passed; how many."""


def open_ledger(url: str) -> Ledger:
    """An unopened ledger in the SQL database of the perdure URL ``url``."""
    from perdure.registry import state_url

    sql = state_url(url)
    if sql.split("://", 1)[0].lower() == "sqlite":
        from perdure.gateway.sqlite_ledger import SqliteLedger

        return SqliteLedger(sql)
    from perdure.gateway.postgres_ledger import PostgresLedger

    return PostgresLedger(sql)


#: The columns every read selects, in ``decode_row``'s order.
COLUMNS = (
    "scope, key, fingerprint, state, owner, started_at, lease_until, finished_at, "
    "status, headers, body, body_size, body_aside, reason, expires_at"
)


def encode_headers(headers: Sequence[tuple[str, str]]) -> str:
    return json.dumps([list(h) for h in headers], separators=(",", ":"))


def decode_row(row: Sequence[Any], aside: bytes | None = None) -> Attempt:
    """An attempt from a row of ``COLUMNS``; ``aside`` is its body from ``gateway_bodies``."""
    (scope, key, fp, state, owner, started, lease, finished) = row[:8]
    (status, headers, body, size, body_aside, reason, expires) = row[8:]
    response = None
    if state == "done" and status is not None:
        pairs: list[list[str]] = json.loads(str(headers or "[]"))
        stored = aside if body_aside else (None if body is None else bytes(body))
        response = StoredResponse(
            int(status), tuple((str(n), str(v)) for n, v in pairs), stored, int(size or 0)
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
