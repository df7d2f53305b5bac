"""Login attempts per client: after ``limit`` failed logins within ``window`` seconds a
client is refused (HTTP 429 with ``Retry-After``) until its oldest failure leaves the
window, even with the right secret, so the shared secret cannot be guessed at speed.

A client is the peer address uvicorn reports; behind a reverse proxy on the same host
uvicorn takes it from ``X-Forwarded-For`` (its ``forwarded_allow_ips`` default trusts
127.0.0.1 only), so one client's failures do not lock everyone out. The table is
bounded: the clients seen longest ago are forgotten first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

#: Failed logins a client may make per window.
LIMIT = 5
WINDOW_SECONDS = 60.0
#: Clients remembered at most (an attacker with many addresses cannot grow it further).
MAX_CLIENTS = 10_000


class LoginThrottled(Exception):
    """Too many failed logins from ``client``: refused for ``retry_after`` seconds."""

    def __init__(self, client: str, retry_after: int) -> None:
        super().__init__(f"too many failed logins from this client; try again in {retry_after}s")
        self.client = client
        self.retry_after = retry_after


class LoginThrottle:
    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        if limit < 1 or window <= 0:
            raise ValueError(
                f"a login limit needs limit >= 1 and window > 0 (got {limit}, {window})"
            )
        self.limit = limit
        self.window = window
        self.clock = clock
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str, now: float) -> deque[float]:
        failures = self._failures.get(client)
        if failures is None:
            return deque()
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            del self._failures[client]
        return failures

    def check(self, client: str) -> None:
        """Raise ``LoginThrottled`` if ``client`` may not try to log in now."""
        now = self.clock()
        failures = self._recent(client, now)
        if len(failures) >= self.limit:
            wait = failures[len(failures) - self.limit] + self.window - now
            raise LoginThrottled(client, max(1, math.ceil(wait)))

    def failed(self, client: str) -> None:
        now = self.clock()
        failures = self._recent(client, now)
        failures.append(now)
        self._failures[client] = failures
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)
