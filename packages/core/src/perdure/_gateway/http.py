"""The HTTP gateway: an ASGI reverse proxy (a plain ASGI app in, ``client.Upstream``
out) that forwards a request carrying an ``Idempotency-Key`` header to its upstream at
most once.

``/NAME/rest/of/path?query`` goes to ``URL/rest/of/path?query`` of the upstream named
``NAME``. A request without the header passes through untouched (or is refused with
``require_key``). Retries get the stored status, headers and body, plus
``Idempotent-Replayed: true``. The gateway answers itself, with a JSON body whose
``error`` says why: ``409 outcome_unknown`` (the first call's outcome is unknown; it is
not re-sent; header ``Perdure-Outcome: unknown``), ``409 in_progress``, ``422
idempotency_key_reused``, ``502 upstream_unreachable`` (nothing was sent), ``503
ledger_unavailable`` (nothing was sent), ``404 unknown_upstream``, ``413
request_too_large``.

``GET /_perdure/status`` tells what this process forwards and who waits on it.

The outbound client is ``perdure._gateway.client`` (httptools' parser and a keep-alive
pool per upstream): per forwarded call it costs a fraction of aiohttp's CPU, and it
says exactly whether a failed request may have left. Served by uvicorn, which picks
httptools and uvloop (both in the extra) over h11 and asyncio's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from perdure._errors import BackendUnavailableError, PerdureError
from perdure._gateway.client import Upstream, UpstreamError
from perdure._gateway.ledger import Ledger, open_ledger
from perdure._gateway.once import GatewayRefusal, NotSent, Once, OutcomeUnknown
from perdure._gateway.records import StoredResponse, fingerprint
from perdure._gateway.upstreams import check_name, check_url
from perdure._semantics.unresolved import OUTCOME_HEADER, UNKNOWN

KEY_HEADER = b"idempotency-key"
STATUS_PATH = "/_perdure/status"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_OUTCOME_UNKNOWN = (OUTCOME_HEADER.lower().encode(), UNKNOWN.encode())

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Headers = Sequence[tuple[bytes, bytes]]
#: What the gateway answers: status, raw headers, body.
_Answer = tuple[int, Headers, bytes]

#: Hop-by-hop headers (RFC 9110 §7.6.1) and those the proxy recomputes.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
#: Not forwarded in a request: the hop-by-hop ones, and ``Expect`` (the gateway has read
#: the whole body already; uvicorn answered the caller's ``100 Continue``).
_HOP_REQUEST = frozenset(h.encode() for h in (*_HOP, "expect"))


@dataclass(frozen=True)
class GatewaySettings:
    """What ``create_app`` serves. ``url`` is a perdure URL (the ledger's database)."""

    url: str
    upstreams: Mapping[str, str]
    #: Seconds an answered key is kept (retries within it get the stored answer).
    retention: float = 24 * 3600.0
    #: Seconds the upstream may take; past it the outcome is unknown.
    timeout: float = 60.0
    #: Largest response body stored for replay; a larger one is answered once, and its
    #: retries hear that it was delivered but not kept (``409 response_not_kept``).
    max_body: int = 8 * 1024 * 1024
    #: Largest request body accepted.
    max_request: int = 16 * 1024 * 1024
    #: Refuse requests without an ``Idempotency-Key`` (``428 idempotency_key_required``).
    require_key: bool = False
    lease: float = 30.0
    upstream_names: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        for name, url in self.upstreams.items():
            check_name(name)
            check_url(name, url)
        object.__setattr__(self, "upstream_names", tuple(self.upstreams))


class _Proxy:
    def __init__(self, settings: GatewaySettings, ledger: Ledger) -> None:
        self.settings = settings
        self.ledger = ledger
        self.once = Once(
            ledger,
            retention=settings.retention,
            lease=settings.lease,
            max_body=settings.max_body,
            wait_limit=settings.timeout + settings.lease,
        )
        # Forwards what the caller sent and nothing more: no default headers, no decoding
        # of the body, no cookies kept from one caller for the next.
        self.upstreams = {
            name: Upstream(url, timeout=settings.timeout)
            for name, url in settings.upstreams.items()
        }

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        await self.ledger.open()
        tasks = [
            asyncio.ensure_future(self.once.renew_forever()),
            asyncio.ensure_future(self.once.purge_forever()),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await self.once.drain()
            for upstream in self.upstreams.values():
                await upstream.close()
            await self.ledger.close()

    def status(self) -> _Answer:
        return _json(200, {"upstreams": list(self.settings.upstreams), **self.once.status()})

    async def handle(
        self, name: str, rest: str, query: str, method: str, raw: Headers, body: bytes
    ) -> _Answer:
        upstream = self.upstreams.get(name)
        if upstream is None:
            return _error(404, "unknown_upstream", f"no upstream named {name!r}")
        target = f"/{rest}?{query}" if query else f"/{rest}"
        headers: list[tuple[bytes, bytes]] = []
        key: str | None = None
        for k, v in raw:  # ASGI servers give the names in lower case
            if k == KEY_HEADER:
                key = v.decode("latin-1")
            if k not in _HOP_REQUEST:
                headers.append((k, v))

        async def send() -> StoredResponse:
            return await _send(upstream, method, target, headers, body)

        if key is None:
            if self.settings.require_key:
                return _error(428, "idempotency_key_required", "send an Idempotency-Key header")
            try:
                return _stored(await send(), replayed=None)
            except NotSent as exc:
                return _error(502, "upstream_unreachable", f"{name!r} could not be reached: {exc}")
            except (UpstreamError, TimeoutError) as exc:
                return _error(502, "upstream_error", f"{name!r}: {type(exc).__name__}: {exc}")
        fp = fingerprint(method, f"/{rest}?{query}", body)
        try:
            reply = await self.once.call(name, key, fp, send)
        except GatewayRefusal as exc:
            # The header lets a worker's effect see, whatever its HTTP client, that a
            # retry cannot help: its run parks at the step (``semantics.unresolved``).
            marked = [_OUTCOME_UNKNOWN] if isinstance(exc, OutcomeUnknown) else []
            return _json(exc.status, exc.body(), marked)
        except BackendUnavailableError as exc:
            return _error(503, "ledger_unavailable", f"nothing was sent: {exc}", upstream=name)
        except PerdureError as exc:
            return _error(500, "ledger_error", f"nothing was sent: {exc}", upstream=name)
        stored = reply.response
        if reply.replayed and stored.body is None:
            return _error(
                409,
                "response_not_kept",
                f"the call with idempotency key {key!r} was made once; its answer "
                f"({stored.body_size} bytes) was larger than the gateway keeps",
                upstream=name,
                idempotency_key=key,
                status=stored.status,
            )
        return _stored(stored, replayed=reply.replayed)


async def _send(
    upstream: Upstream, method: str, target: str, headers: Headers, body: bytes
) -> StoredResponse:
    """Forward once; ``NotSent`` if provably nothing left (``ConnectFailed``). The path
    and query go as the caller encoded them."""
    try:
        response = await upstream.request(method, target, headers, body)
    except UpstreamError as exc:
        if exc.sent:
            raise
        raise NotSent(str(exc)) from exc
    pairs: list[tuple[str, str]] = []
    for k, v in response.headers:
        name = k.decode("latin-1").lower()
        if name not in _HOP:
            pairs.append((name, v.decode("latin-1")))
    payload = response.body
    return StoredResponse(response.status, tuple(pairs), payload, len(payload))


def _stored(stored: StoredResponse, replayed: bool | None) -> _Answer:
    body = stored.body or b""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in stored.headers]
    raw.append((b"content-length", str(len(body)).encode()))
    if replayed:
        raw.append((b"idempotent-replayed", b"true"))
    return stored.status, raw, body


def _json(status: int, data: object, extra: Headers = ()) -> _Answer:
    body = json.dumps(data).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return status, [*headers, *extra], body


def _error(http_status: int, code: str, message: str, **extra: object) -> _Answer:
    return _json(http_status, {"error": code, "message": message, **extra})


def create_app(settings: GatewaySettings, ledger: Ledger | None = None) -> GatewayApp:
    """The gateway as an ASGI app, to serve with uvicorn or mount in your own server."""
    return GatewayApp(_Proxy(settings, ledger or open_ledger(settings.url)))


class GatewayApp:
    """A plain ASGI app, not a framework's: two routes need no router, and per call
    Starlette's middleware, request and response objects cost more CPU than the
    gateway's own work. ``/_perdure/status`` (GET) and ``/NAME/rest`` (the methods
    below); a ``lifespan`` scope opens and closes the ledger and the outbound client."""

    def __init__(self, proxy: _Proxy) -> None:
        self._proxy = proxy
        self._running: contextlib.AbstractAsyncContextManager[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            try:
                answer = await self._route(scope, receive)
            except _CallerLeft:
                return
            await _answer(send, answer)

    async def _route(self, scope: Scope, receive: Receive) -> _Answer:
        raw_path: bytes | None = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else quote(scope["path"])
        method: str = scope["method"]
        if path == STATUS_PATH:
            if method not in ("GET", "HEAD"):
                return _not_allowed("GET, HEAD")
            return self._proxy.status()
        name, sep, rest = path[1:].partition("/")
        if not sep or not name:
            return _error(404, "not_found", f"no route {path!r}: use /NAME/rest/of/path")
        if method not in _METHODS:
            return _not_allowed(", ".join(_METHODS))
        body = await _read_body(receive, self._proxy.settings.max_request)
        if body is None:
            limit = self._proxy.settings.max_request
            return _error(413, "request_too_large", f"request body over {limit} bytes")
        query = scope.get("query_string", b"").decode("latin-1")
        return await self._proxy.handle(name, rest, query, method, scope["headers"], body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._running = self._proxy.running()
                try:
                    await self._running.__aenter__()
                except Exception as exc:
                    self._running = None
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                running, self._running = self._running, None
                if running is not None:
                    await running.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


class _CallerLeft(Exception):
    """The caller disconnected before its request was whole: nothing to answer."""


def _not_allowed(allow: str) -> _Answer:
    status, headers, body = _error(405, "method_not_allowed", f"allowed: {allow}")
    return status, [*headers, (b"allow", allow.encode())], body


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body; None once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _CallerLeft
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _answer(send: Send, answer: _Answer) -> None:
    status, headers, body = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
