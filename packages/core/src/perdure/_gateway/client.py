"""The gateway's outbound HTTP/1.1 client: asyncio Protocols, httptools' parser (llhttp,
as uvicorn uses it) and one keep-alive pool per upstream.

Why not a general client: per forwarded call aiohttp's Python path (request and
response objects, payload registry, timers, stream reader) was the largest part of the
gateway's CPU after its own ledger writes. A proxy needs much less: send the caller's
method, path, headers and whole body; read one whole response; keep the connection if
the upstream allows it. ``Upstream.request`` does that with one ``write`` per request
and no per-call objects beyond the answer.

What a failure means matters more here than in a general client, because the gateway
promises a call at most once: ``ConnectFailed`` is raised only when no byte of the
request left (the connection could not be opened); every other failure after the
request was written (``ConnectionClosed``, ``BadResponse``, ``UpstreamTimeout``) leaves
the outcome unknown. A pooled connection is dropped after ``idle_timeout`` seconds
unused, before a typical server's keep-alive ends, so a request rarely meets a
connection the server is closing (which would make its outcome unknown).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

from perdure._errors import ConfigurationError

#: Methods whose request carries a ``Content-Length`` even when the body is empty.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class UpstreamError(Exception):
    """A call to an upstream failed. ``sent`` says whether the request may have left."""

    sent = True


class ConnectFailed(UpstreamError):
    """No connection could be opened (refused, unresolvable, TLS handshake, timeout):
    no byte of the request was sent."""

    sent = False


class BadRequest(UpstreamError):
    """The request cannot be written as HTTP/1.1 (a CR or LF where none may be): it
    was not sent."""

    sent = False


class ConnectionClosed(UpstreamError):
    """The upstream closed the connection before its whole answer arrived."""


class BadResponse(UpstreamError):
    """The upstream's answer is not HTTP/1.x this client can read."""


class UpstreamTimeout(UpstreamError, TimeoutError):
    """No whole answer within the request's timeout."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    #: Raw ``(name, value)`` pairs as received, hop-by-hop ones included.
    headers: list[tuple[bytes, bytes]]
    body: bytes


class _Connection(asyncio.Protocol):
    """One connection; one request at a time (no pipelining)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, where: str) -> None:
        self._loop = loop
        self._where = where
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        #: False once closed, or after an answer that ends the connection.
        self.reusable = True
        self.idle_since = 0.0
        self._answer: asyncio.Future[Response] | None = None
        self._head = False
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._headers_done = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's, but they are transports.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._answer is None:  # nothing was asked: the connection is not HTTP we know
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadResponse(f"{self._where}: the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"{self._where}: unreadable answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        if self._answer is None:
            return
        if self._headers_done and self._until_eof():
            self._complete()  # the body ran to the end of the connection: it is whole
            return
        why = f": {exc}" if exc else ""
        self._fail(ConnectionClosed(f"{self._where}: the connection closed mid-answer{why}"))

    # -- httptools callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._headers_done = True
        if self._head and self._status >= 200:
            # The parser would wait for the body a Content-Length announces; a HEAD
            # answer has none. Done, and the parser's state is not reusable.
            self.reusable = False
            self._complete()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._status < 200:  # 1xx: an interim answer; the final one follows
            self._headers, self._body, self._headers_done = [], [], False
            return
        if not self._parser.should_keep_alive():
            self.reusable = False
        self._complete()

    # -- the pool's side ---------------------------------------------------------------

    def send(self, request: bytes, head: bool) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._answer = answer = self._loop.create_future()
        self._head = head
        self._headers, self._body, self._headers_done = [], [], False
        self.transport.write(request)
        return answer

    def timed_out(self, seconds: float) -> None:
        self._fail(UpstreamTimeout(f"{self._where}: no whole answer within {seconds:g}s"))

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _complete(self) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            parts = self._body
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            answer.set_result(Response(self._status, self._headers, body))

    def _fail(self, error: UpstreamError) -> None:
        answer, self._answer = self._answer, None
        self.close()
        if answer is not None and not answer.done():
            answer.set_exception(error)

    def _until_eof(self) -> bool:
        """True if the answer's body is delimited by the end of the connection."""
        for name, value in self._headers:
            lower = name.lower()
            if lower == b"content-length" or (
                lower == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                return False
        return True


class Upstream:
    """Keep-alive connections to one upstream ``http://`` or ``https://`` URL; a
    request's target is appended to the URL's path."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        max_connections: int = 200,
        max_idle: int = 32,
        idle_timeout: float = 2.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"upstream {url!r} is not an http:// or https:// URL")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        tls = parts.scheme == "https"
        self._ssl = (ssl_context or ssl.create_default_context()) if tls else None
        self._prefix = parts.path.rstrip("/").encode("latin-1")
        self._host_line = b"host: " + parts.netloc.rpartition("@")[2].encode("idna") + b"\r\n"
        self._where = f"upstream {parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def request(
        self, method: str, target: str, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> Response:
        """Send one request (``target``: path and query, already encoded) and read its
        whole answer. ``headers`` go as given: no Host (this sets it), no framing
        headers (``Content-Length`` is set from ``body``), nothing hop-by-hop."""
        request = self._encode(method, target, headers, body)
        loop = asyncio.get_running_loop()
        await self._slots.acquire()
        try:
            conn = self._reuse(loop) or await self._connect(loop)
            timer = loop.call_later(self.timeout, conn.timed_out, self.timeout)
            try:
                response = await conn.send(request, method == "HEAD")
            except BaseException:
                self._drop(conn)  # cancelled or failed mid-call: its state is unknown
                raise
            finally:
                timer.cancel()
            self._keep(conn, loop)
            return response
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Close every connection; a request in flight fails with ``ConnectionClosed``."""
        for conn in list(self._open):
            conn.close()
        self._idle.clear()

    @property
    def idle(self) -> int:
        """Pooled connections waiting for a request (not those closed meanwhile)."""
        return sum(conn.reusable for conn in self._idle)

    def _encode(
        self, method: str, target: str, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        line = method.encode("ascii") + b" " + self._prefix + target.encode("latin-1")
        lines = [line + b" HTTP/1.1\r\n", self._host_line]
        for name, value in headers:
            lines.append(name + b": " + value + b"\r\n")
        if body or method in _BODY_METHODS:
            lines.append(b"content-length: " + str(len(body)).encode() + b"\r\n")
        lines.append(b"\r\n")
        head = b"".join(lines)
        # What reaches the upstream must be the request asked for, not two of them: one
        # CR LF per line, none inside a name, value or the request line.
        n = len(lines)
        framed = head.count(b"\n") == n and head.count(b"\r") == n
        if not framed or " " in target or not method.isalpha():
            raise BadRequest(f"{self._where}: method, target or a header has a forbidden byte")
        return head + body if body else head

    def _reuse(self, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        stale_before = loop.time() - self.idle_timeout
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable and conn.idle_since >= stale_before:
                return conn
            self._drop(conn)
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, self._where),
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                )
        except (OSError, TimeoutError) as exc:
            why = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            raise ConnectFailed(f"{self._where}: cannot connect: {why}") from exc
        self._open.add(conn)
        return conn

    def _keep(self, conn: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        if conn.reusable and len(self._idle) < self.max_idle:
            conn.idle_since = loop.time()
            self._idle.append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)
