"""The HTTP gateway: an ASGI reverse proxy (Starlette in, aiohttp out) that forwards a
request carrying an ``Idempotency-Key`` header to its upstream at most once.

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

The outbound client is aiohttp (C-accelerated parser, keep-alive pool, TCP_NODELAY):
per forwarded call it costs about half the CPU of httpx's async client, and the
gateway's overhead is mostly that hop. Served by uvicorn, which picks httptools and
uvloop (both in the extra) over h11 and asyncio's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from yarl import URL

from perdure.errors import BackendUnavailableError, PerdureError
from perdure.gateway.ledger import Ledger, open_ledger
from perdure.gateway.once import GatewayRefusal, NotSent, Once, OutcomeUnknown
from perdure.gateway.records import StoredResponse, fingerprint
from perdure.gateway.upstreams import check_name, check_url
from perdure.semantics.unresolved import OUTCOME_HEADER, UNKNOWN

KEY_HEADER = "idempotency-key"

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


#: Headers aiohttp would add on its own; a forwarded request carries the caller's only.
_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


def _error(http_status: int, code: str, message: str, **extra: object) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=http_status)


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
        self.client: aiohttp.ClientSession | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        await self.ledger.open()
        self.client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=200),
            timeout=aiohttp.ClientTimeout(total=self.settings.timeout),
            # Forward what the caller sent and nothing more: no default headers, no
            # decoding of the body, no cookies kept from one caller for the next.
            skip_auto_headers=_AUTO_HEADERS,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        tasks = [
            asyncio.ensure_future(self.once.renew_forever()),
            asyncio.ensure_future(self.once.purge_forever()),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await self.client.close()
            await self.ledger.close()

    async def status(self, request: Request) -> Response:
        return JSONResponse({"upstreams": list(self.settings.upstreams), **self.once.status()})

    async def handle(self, request: Request) -> Response:
        name = request.path_params["upstream"]
        base = self.settings.upstreams.get(name)
        if base is None:
            return _error(404, "unknown_upstream", f"no upstream named {name!r}")
        body = await request.body()
        if len(body) > self.settings.max_request:
            return _error(
                413, "request_too_large", f"request body over {self.settings.max_request} bytes"
            )
        rest = request.path_params["rest"]
        target = f"{base}/{rest}"
        if request.url.query:
            target += f"?{request.url.query}"
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        key = request.headers.get(KEY_HEADER)

        async def send() -> StoredResponse:
            return await self._send(request.method, target, headers, body)

        if key is None:
            if self.settings.require_key:
                return _error(428, "idempotency_key_required", "send an Idempotency-Key header")
            try:
                return _response(await send(), replayed=None)
            except NotSent as exc:
                return _error(502, "upstream_unreachable", f"{name!r} could not be reached: {exc}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                return _error(502, "upstream_error", f"{name!r}: {type(exc).__name__}: {exc}")
        fp = fingerprint(request.method, f"/{rest}?{request.url.query}", body)
        try:
            reply = await self.once.call(name, key, fp, send)
        except GatewayRefusal as exc:
            # The header lets a worker's effect see, whatever its HTTP client, that a
            # retry cannot help: its run parks at the step (``semantics.unresolved``).
            marked = {OUTCOME_HEADER: UNKNOWN} if isinstance(exc, OutcomeUnknown) else None
            return JSONResponse(exc.body(), status_code=exc.status, headers=marked)
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
        return _response(stored, replayed=reply.replayed)

    async def _send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes
    ) -> StoredResponse:
        assert self.client is not None
        try:
            async with self.client.request(
                method,
                URL(url, encoded=True),  # the path and query as the caller wrote them
                headers=headers,
                data=body or None,
                allow_redirects=False,
            ) as response:
                payload = await response.read()
                raw = response.raw_headers
                status = response.status
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise NotSent(f"{type(exc).__name__}: {exc}") from exc
        pairs = tuple(
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in raw
            if k.decode("latin-1").lower() not in _HOP
        )
        return StoredResponse(status, pairs, payload, len(payload))


def _response(stored: StoredResponse, replayed: bool | None) -> Response:
    response = Response(stored.body or b"", status_code=stored.status)
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in stored.headers]
    raw.append((b"content-length", str(len(stored.body or b"")).encode()))
    if replayed:
        raw.append((b"idempotent-replayed", b"true"))
    response.raw_headers = raw
    return response


def create_app(settings: GatewaySettings, ledger: Ledger | None = None) -> Starlette:
    """The gateway as an ASGI app, to serve with uvicorn or mount in your own server."""
    proxy = _Proxy(settings, ledger or open_ledger(settings.url))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncGenerator[None]:
        async with proxy.running():
            yield

    return Starlette(
        routes=[
            Route("/_perdure/status", proxy.status, methods=["GET"]),
            Route(
                "/{upstream}/{rest:path}",
                proxy.handle,
                methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
            ),
        ],
        lifespan=lifespan,
    )
