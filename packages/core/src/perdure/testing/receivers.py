"""Side-effect receivers on 127.0.0.1 that count what workers do, from outside them.

One ``Receiver`` serves a few endpoints over real HTTP:

* ``POST /dedup/<name>`` honours the ``Idempotency-Key`` header, like a payment API:
  a repeated key returns the first answer and applies nothing.
* ``POST /plain/<name>`` applies every request, like an email relay.
* ``POST /flaky/<name>`` fails with 503 until ``fail_next(name, n)`` failures are used.

Tests read the ledger in their own process, and can hold a request at a chosen moment
(``hold``) to SIGKILL a worker there: before the receiver applies the effect, or after
it applied it but before the worker hears back.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from perdure.testing.patience import Patience

HoldPoint = Literal["before", "after"]
#: What else a waiter sees progress in (a process's output, a run's history length).
Watch = Callable[[], Hashable]
#: How often a waiter looks at ``watch`` and its patience (requests wake it at once).
WATCH_PACE = 0.5


@dataclass
class _Hold:
    point: HoldPoint
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    dropped: bool = False

    def drop(self) -> None:
        """Release a ``before`` hold without applying: the sender died mid-request."""
        self.dropped = True
        self.release.set()


class Receiver:
    """An HTTP receiver of effects with a ledger and hold points. Use as a context manager."""

    def __init__(self, keep_alive: bool = False) -> None:
        #: HTTP/1.1 with keep-alive, as most real services; else HTTP/1.0, one
        #: connection per request (a client never finds a stale pooled connection).
        self.keep_alive = keep_alive
        self._lock = threading.Lock()
        self.applied: Counter[str] = Counter()  # effects applied per endpoint name
        self.requests: Counter[str] = Counter()  # requests received per endpoint name
        self.keys: defaultdict[str, list[str]] = defaultdict(list)  # keys per name, in order
        self.bodies: defaultdict[str, list[Any]] = defaultdict(list)
        #: (wall-clock time, endpoint name) of every request, in arrival order.
        self.arrivals: list[tuple[float, str]] = []
        self._answers: dict[tuple[str, str], dict[str, Any]] = {}
        self._failures: Counter[str] = Counter()
        self._holds: dict[str, _Hold] = {}
        self._arrivals = threading.Condition(self._lock)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for hold in self._holds.values():
            hold.release.set()
        self._server.shutdown()
        self._server.server_close()

    # -- test controls -------------------------------------------------------------

    def hold(self, name: str, point: HoldPoint = "after") -> _Hold:
        """Hold the next request to ``name`` before or after applying it, until released."""
        h = _Hold(point)
        with self._lock:
            self._holds[name] = h
        return h

    def wait_held(self, hold: _Hold, timeout: float = 60.0, *, watch: Watch | None = None) -> None:
        """Block until a request reaches ``hold``. Times out only after ``timeout``
        seconds in which nothing moved (``Patience``): no request reached the receiver
        and ``watch()`` (what else the caller sees progress in) did not change."""
        if not self._wait(hold.arrived.is_set, timeout, watch):
            raise TimeoutError(
                f"no request reached the hold point, and nothing moved for {timeout}s"
            )

    def fail_next(self, name: str, count: int) -> None:
        """Answer the next ``count`` requests to ``/flaky/name`` with HTTP 503."""
        with self._lock:
            self._failures[name] = count

    def wait_requests(
        self, name: str, count: int, timeout: float = 60.0, *, watch: Watch | None = None
    ) -> None:
        """Block until ``name`` received at least ``count`` requests; a timeout only after
        ``timeout`` seconds in which nothing moved (as ``wait_held``)."""
        if not self._wait(lambda: self.requests[name] >= count, timeout, watch):
            raise TimeoutError(
                f"{name!r} received {self.requests[name]} request(s), expected {count}, "
                f"and nothing moved for {timeout}s"
            )

    def wait_total(self, count: int, timeout: float = 60.0) -> bool:
        """Block until all endpoints together received ``count`` requests; False once
        nothing moved for ``timeout`` seconds."""
        return self._wait(lambda: len(self.arrivals) >= count, timeout, None)

    def wait_settled(self, name: str, timeout: float = 30.0) -> bool:
        """Block until every request ``/plain/name`` received has been applied: none is
        half-handled, so the ledger says for sure what happened. False once nothing
        moved for ``timeout`` seconds (a request is held)."""
        return self._wait(lambda: self.requests[name] == self.applied[name], timeout, None)

    def _wait(self, done: Callable[[], bool], stall: float, watch: Watch | None) -> bool:
        """Wait until ``done()``; False after ``stall`` seconds without progress: no new
        request, no effect applied, ``watch()`` unchanged."""
        patience = Patience(stall)
        while True:
            with self._arrivals:
                # Woken at once by every request; the pace only bounds how late a stall
                # (or a change in what ``watch`` sees) is noticed.
                if self._arrivals.wait_for(done, WATCH_PACE):
                    return True
                seen = (len(self.arrivals), sum(self.applied.values()))
            patience.observe((seen, None if watch is None else watch()))
            if patience.expired():
                return False

    # -- HTTP ----------------------------------------------------------------------

    def _handle(self, mode: str, name: str, key: str | None, body: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests[name] += 1
            self.arrivals.append((time.time(), name))
            self._arrivals.notify_all()
            hold = self._holds.pop(name, None)
        if hold is not None and hold.point == "before":
            self._arrived(hold)
            hold.release.wait()
            if hold.dropped:
                return 503, {"error": "sender gone"}
        with self._lock:
            if mode == "flaky" and self._failures[name] > 0:
                self._failures[name] -= 1
                status, answer = 503, {"error": "try again"}
            elif mode == "dedup" and key is not None and (name, key) in self._answers:
                status, answer = 200, {**self._answers[(name, key)], "duplicate": True}
            else:
                self.applied[name] += 1
                self._arrivals.notify_all()
                self.keys[name].append(key or "")
                self.bodies[name].append(body)
                answer = {"id": f"{name}-{self.applied[name]}", "duplicate": False}
                if mode == "dedup" and key is not None:
                    self._answers[(name, key)] = answer
                status = 200
        if hold is not None and hold.point == "after":
            self._arrived(hold)
            hold.release.wait()
        return status, answer

    def _arrived(self, hold: _Hold) -> None:
        with self._lock:
            hold.arrived.set()
            self._arrivals.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if receiver.keep_alive else "HTTP/1.0"
            # Headers and body go out in two writes: on a kept-alive connection Nagle
            # would hold the body until the client's delayed ACK (~40 ms).
            disable_nagle_algorithm = receiver.keep_alive

            def do_POST(self) -> None:
                parts = self.path.strip("/").split("/")
                if len(parts) != 2 or parts[0] not in ("dedup", "plain", "flaky"):
                    self.send_error(404)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"null"
                status, answer = receiver._handle(
                    parts[0], parts[1], self.headers.get("Idempotency-Key"), json.loads(raw)
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler


def post(url: str, body: Any = None, *, key: str | None = None, timeout: float = 30.0) -> Any:
    """POST JSON to a receiver with the stdlib (no extra dependency in workers).

    Raises ``ConnectionError`` on a 5xx answer so retry policies see a transient error.
    """
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise ConnectionError(f"{url} answered {exc.code}") from exc
        raise
