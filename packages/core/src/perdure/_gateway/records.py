"""What the gateway's ledger holds: one attempt per (scope, idempotency key).

An attempt is ``in_flight`` from the moment it is recorded, before the request leaves
the gateway, until the upstream's answer is stored (``done``). When the gateway that
forwarded it dies or loses the connection mid-call, nobody knows whether the upstream
applied it: the attempt becomes ``unknown`` and stays so until an operator resolves it
(``perdure gateway forget``); it is never re-sent by itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

State = Literal["in_flight", "done", "unknown"]
STATES: tuple[State, ...] = ("in_flight", "done", "unknown")


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The upstream's answer, replayed to every retry of the key."""

    status: int
    #: ``(name, value)`` pairs as the upstream sent them (hop-by-hop ones dropped).
    headers: tuple[tuple[str, str], ...]
    #: None when the body was larger than the gateway keeps (``body_size`` says how large).
    body: bytes | None
    body_size: int


@dataclass(frozen=True, slots=True)
class Attempt:
    """One call through the gateway, as the ledger holds it."""

    scope: str
    key: str
    fingerprint: str
    state: State
    owner: str | None
    started_at: float
    lease_until: float | None
    finished_at: float | None = None
    response: StoredResponse | None = None
    #: Why the outcome is unknown (``unknown`` attempts only).
    reason: str | None = None
    expires_at: float | None = None


def fingerprint(*parts: bytes | str) -> str:
    """SHA-256 over ``parts``: a key reused for a different request is told apart."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()
