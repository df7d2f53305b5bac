"""The gateway's one rule, shared by the HTTP and the MCP proxy: a call carrying an
idempotency key reaches the upstream at most once.

1. The attempt is recorded (``in_flight``, owned by this gateway) *before* the call
   leaves; the database's primary key lets exactly one claimant through.
2. The owner makes the call once, hands the answer to its caller, then stores it; every
   retry with the key is answered from the ledger (one that comes before the answer is
   stored waits for it, as in 3).
3. A duplicate that arrives while the first is in flight waits for it: on an event
   when the owner is this process, else by reading the ledger with capped backoff.
4. If the owner died (its process is gone on this host, or its lease expired) or lost
   the answer (timeout, dropped connection), the outcome is unknown: the attempt is
   marked so, and every caller hears ``OutcomeUnknown`` until an operator forgets it.
   A call that provably never left (connection refused) is released instead, so the
   caller may retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from perdure._engine.owners import new_owner_id, owner_is_dead
from perdure._gateway.ledger import Ledger
from perdure._gateway.records import Attempt, StoredResponse

_log = logging.getLogger("perdure.gateway")


class GatewayRefusal(Exception):
    """A call the gateway answers itself, with a typed body (``code``) and HTTP status."""

    status = 409
    code = "refused"

    def __init__(self, scope: str, key: str, message: str, attempt: Attempt | None = None):
        super().__init__(message)
        self.scope, self.key, self.attempt = scope, key, attempt

    def body(self) -> dict[str, object]:
        out: dict[str, object] = {
            "error": self.code,
            "message": str(self),
            "upstream": self.scope,
            "idempotency_key": self.key,
        }
        if self.attempt is not None:
            out["started_at"] = self.attempt.started_at
            if self.attempt.reason:
                out["reason"] = self.attempt.reason
        return out


class OutcomeUnknown(GatewayRefusal):
    """The call may or may not have reached the upstream; it is not sent again."""

    code = "outcome_unknown"


class InProgress(GatewayRefusal):
    """The first call with this key is still in flight after the wait limit."""

    code = "in_progress"


class KeyReused(GatewayRefusal):
    """The key was used for a different request (method, path or body differ)."""

    status = 422
    code = "idempotency_key_reused"


class NotSent(Exception):
    """Raised by a call that provably never reached the upstream (e.g. refused)."""


class Unreachable(GatewayRefusal):
    """The upstream could not be reached; nothing was sent, a retry may succeed."""

    status = 502
    code = "upstream_unreachable"


@dataclass(frozen=True)
class Reply:
    response: StoredResponse
    #: True when answered from the ledger (a retry), False for the call just made.
    replayed: bool


@dataclass
class Once:
    """Applies the rule over one ledger; one per gateway process."""

    ledger: Ledger
    #: Seconds an answered key is kept.
    retention: float = 24 * 3600.0
    #: How long a claim stays valid without renewal; renewed every third of it.
    lease: float = 30.0
    #: How long a duplicate waits for the first call before hearing ``InProgress``.
    wait_limit: float = 120.0
    #: Largest body stored for replay; a larger answer is kept without its body.
    max_body: int = 8 * 1024 * 1024
    owner: str = field(default_factory=new_owner_id)
    _inflight: dict[tuple[str, str], asyncio.Event] = field(default_factory=lambda: {})
    _waiting: dict[tuple[str, str], int] = field(default_factory=lambda: {})
    #: Tasks sending and recording a call (held: the loop keeps only weak references).
    _recording: set[asyncio.Task[None]] = field(default_factory=lambda: set())

    async def call(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        send: Callable[[], Awaitable[StoredResponse]],
    ) -> Reply:
        """``send()`` at most once for ``(scope, key)``; a retry gets its stored answer."""
        deadline = time.monotonic() + self.wait_limit
        pause = 0.005
        while True:
            now = time.time()
            found = await self.ledger.claim(
                scope, key, fingerprint, self.owner, now, now + self.lease
            )
            if found is None:
                return Reply(await self._forward(scope, key, send), replayed=False)
            if found.fingerprint != fingerprint:
                raise KeyReused(
                    scope, key, f"idempotency key {key!r} was first used for a different request"
                )
            if found.state == "done" and found.response is not None:
                return Reply(found.response, replayed=True)
            if found.state == "unknown":
                raise OutcomeUnknown(
                    scope,
                    key,
                    f"the outcome of the call with idempotency key {key!r} to {scope!r} is "
                    "unknown; it is not sent again. Check the upstream, then "
                    f"`perdure gateway forget {scope} {key}` to let a retry through",
                    found,
                )
            if await self._abandoned(found):
                continue  # now unknown: the next read says so
            if time.monotonic() >= deadline:
                raise InProgress(
                    scope, key, f"the first call with idempotency key {key!r} is still in flight"
                )
            await self._wait(scope, key, found, pause, deadline)
            pause = min(pause * 2, 0.25)

    async def _forward(
        self, scope: str, key: str, send: Callable[[], Awaitable[StoredResponse]]
    ) -> StoredResponse:
        self._inflight[(scope, key)] = asyncio.Event()
        answer: asyncio.Future[StoredResponse] = asyncio.get_running_loop().create_future()
        # A task of its own: a caller that disconnects must not cancel the recording.
        task = asyncio.ensure_future(self._send_and_record(scope, key, send, answer))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)
        return await asyncio.shield(answer)

    async def _send_and_record(
        self,
        scope: str,
        key: str,
        send: Callable[[], Awaitable[StoredResponse]],
        answer: asyncio.Future[StoredResponse],
    ) -> None:
        """Send, hand the answer to the caller, then record it. The caller hears the
        answer before it is stored: a retry that comes before the record finds the
        attempt in flight and waits for it; if this process dies in between, the retry
        hears that the outcome is unknown. Never re-sent either way, and the record's
        commit is off the caller's path."""
        try:
            try:
                response = await send()
            except NotSent as exc:
                await self.ledger.release(scope, key, self.owner)
                raise Unreachable(scope, key, f"{scope!r} could not be reached: {exc}") from exc
            except BaseException as exc:
                reason = f"the call failed mid-way: {type(exc).__name__}: {exc}"
                with contextlib.suppress(Exception):
                    await self.ledger.mark_unknown(scope, key, self.owner, reason)
                if not isinstance(exc, Exception):
                    raise
                raise OutcomeUnknown(scope, key, reason) from exc
        except BaseException as exc:
            if answer.done():
                pass
            elif isinstance(exc, asyncio.CancelledError):
                answer.cancel()
            else:
                answer.set_exception(exc)
            self._done(scope, key)
            if not isinstance(exc, Exception):
                raise
            return
        answer.set_result(response)
        await asyncio.sleep(0)  # let the caller write the answer before the commit
        try:
            await self._record(scope, key, response)
        finally:
            self._done(scope, key)

    async def drain(self) -> None:
        """Until every answer already handed to a caller is recorded: a gateway that
        stops gracefully must not leave those outcomes unknown. Call before closing the
        ledger."""
        while self._recording:
            await asyncio.gather(*self._recording, return_exceptions=True)

    def _done(self, scope: str, key: str) -> None:
        done = self._inflight.pop((scope, key), None)
        if done is not None:
            done.set()

    async def _record(self, scope: str, key: str, response: StoredResponse) -> None:
        now = time.time()
        kept = response
        if response.body is not None and len(response.body) > self.max_body:
            kept = StoredResponse(response.status, response.headers, None, response.body_size)
        try:
            await self.ledger.finish(scope, key, self.owner, kept, now, now + self.retention)
        except Exception:
            # The caller has the real answer; retries find the claim unrenewed once its
            # lease ends, and hear that the outcome is unknown.
            _log.exception("gateway: could not record the answer for %s/%s", scope, key)

    async def _abandoned(self, found: Attempt) -> bool:
        """Mark ``found`` unknown if its owner is gone; True if it was."""
        if found.owner == self.owner:
            return False
        dead = found.owner is None or owner_is_dead(found.owner)
        expired = found.lease_until is not None and found.lease_until < time.time()
        if not (dead or expired):
            return False
        why = "its process is gone" if dead else "its lease expired"
        reason = f"the gateway forwarding it ({found.owner}) stopped before the answer: {why}"
        await self.ledger.mark_unknown(found.scope, found.key, found.owner, reason)
        return True

    async def _wait(
        self, scope: str, key: str, found: Attempt, pause: float, deadline: float
    ) -> None:
        self._waiting[(scope, key)] = self._waiting.get((scope, key), 0) + 1
        try:
            local = self._inflight.get((scope, key))
            if local is not None and found.owner == self.owner:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(local.wait(), max(0.0, deadline - time.monotonic()))
            else:
                # Another gateway forwards it: read the ledger again after a pause.
                await asyncio.sleep(pause)
        finally:
            left = self._waiting[(scope, key)] - 1
            if left:
                self._waiting[(scope, key)] = left
            else:
                del self._waiting[(scope, key)]

    def status(self) -> dict[str, object]:
        """What this process is doing now: in-flight keys and waiting duplicates."""
        return {
            "owner": self.owner,
            "in_flight": [f"{s}/{k}" for s, k in self._inflight],
            "waiting": {f"{s}/{k}": n for (s, k), n in self._waiting.items()},
        }

    async def renew_forever(self) -> None:
        """Keep this process's claims alive while their calls last."""
        while True:
            await asyncio.sleep(self.lease / 3)
            keys = list(self._inflight)
            if keys:
                with contextlib.suppress(Exception):  # an outage: the next round retries
                    await self.ledger.renew(self.owner, keys, time.time() + self.lease)

    async def purge_forever(self, every: float = 300.0) -> None:
        """Drop answered keys past their retention, now and then."""
        while True:
            with contextlib.suppress(Exception):
                await self.ledger.purge(time.time())
            await asyncio.sleep(every)
