"""The demo's services on 127.0.0.1, run in the demo's own process so the ledger is kept
outside the workers that get killed.

``/dedup/payments`` is a payment service honouring ``Idempotency-Key``; ``/plain/email`` a
mail relay that sends every request. Both are ``perdure.testing.receivers.Receiver``
endpoints; this subclass also counts requests per idempotency key for the ledger.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, cast

from perdure.testing.receivers import Receiver

#: Refunds above this need a human's approval (``perdure approve RUN_ID``).
APPROVAL_THRESHOLD_CENTS = 100_00
#: Where the agent's tools find these services (the demo sets it for its workers).
SERVICES_ENV = "PERDURE_DEMO_SERVICES"
PAYMENTS = "payments"  # endpoint names: /dedup/payments and /plain/email
EMAIL = "email"

#: The shop's orders, read by the agent's ``lookup_order`` tool.
ORDERS: dict[str, dict[str, Any]] = {
    "42": {
        "order_id": "42",
        "customer": "ada@example.com",
        "item": "espresso machine (arrived cracked)",
        "amount_cents": 129_00,
        "status": "delivered",
    },
}


def dollars(cents: int) -> str:
    """``12900`` → ``$129.00``."""
    return f"${cents / 100:,.2f}"


@dataclass(frozen=True)
class LedgerLine:
    """What the payment service saw for one idempotency key."""

    key: str
    order_id: str
    amount_cents: int
    requests: int
    applied: int


class DemoServices(Receiver):
    """Payment service and mail relay, with a per-key request count."""

    def __init__(self) -> None:
        super().__init__()
        self.requests_per_key: defaultdict[str, Counter[str]] = defaultdict(Counter)
        # A killed worker never reads its answer; that is the point, not an error to print.
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]

    def __enter__(self) -> DemoServices:
        super().__enter__()
        return self

    def _handle(self, mode: str, name: str, key: str | None, body: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests_per_key[name][key or ""] += 1
        return super()._handle(mode, name, key, body)

    def ledger(self, name: str) -> list[LedgerLine]:
        """One line per idempotency key seen by ``name``, in order of first request."""
        with self._lock:
            applied = Counter(self.keys[name])
            bodies = dict(zip(self.keys[name], self.bodies[name], strict=True))
            lines: list[LedgerLine] = []
            for key, requests in self.requests_per_key[name].items():
                body = fields(bodies.get(key))
                lines.append(
                    LedgerLine(
                        key,
                        str(body.get("order_id", "?")),
                        int(body.get("amount_cents", 0)),
                        requests,
                        applied[key],
                    )
                )
            return lines

    def charges_per_order(self, name: str) -> Counter[str]:
        """Applied charges per order id."""
        with self._lock:
            return Counter(str(fields(body).get("order_id")) for body in self.bodies[name])


def fields(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (request bodies, event data)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}
