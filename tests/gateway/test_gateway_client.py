"""The gateway's outbound HTTP/1.1 client (``perdure._gateway.client``) against a real
TCP server on loopback that answers with scripted bytes: framing (Content-Length,
chunked, to the end of the connection, HEAD, interim 1xx), connection reuse, an
upstream that closes, and what each failure says about whether the request left."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from perdure._gateway.client import (
    BadRequest,
    BadResponse,
    ConnectFailed,
    ConnectionClosed,
    Upstream,
    UpstreamTimeout,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

#: What the server does with one request: the bytes to answer, then close or not.
Script = Callable[[bytes], tuple[bytes, bool]]


@dataclass
class Scripted:
    """A TCP server that reads whole requests and answers each with ``script``."""

    script: Script
    requests: list[bytes] = field(default_factory=lambda: [])
    connections: int = 0
    url: str = ""
    writers: list[asyncio.StreamWriter] = field(default_factory=lambda: [])

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer, close = self.script(request)
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []
    made: list[Scripted] = []

    async def start(script: Script, tls: ssl.SSLContext | None = None) -> Scripted:
        scripted = Scripted(script)
        server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0, ssl=tls)
        scheme = "https" if tls else "http"
        scripted.url = f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        servers.append(server)
        made.append(scripted)
        return scripted

    yield start
    for server in servers:
        server.close()
    for scripted in made:
        for writer in scripted.writers:
            writer.close()


Serve = Callable[..., Awaitable[Scripted]]


def always(answer: bytes, close: bool = False) -> Script:
    return lambda _request: (answer, close)


async def test_a_content_length_answer_is_read_and_its_connection_reused(serve: Serve) -> None:
    server = await serve(always(OK))
    upstream = Upstream(server.url + "/v1")
    for _ in range(3):
        response = await upstream.request("POST", "/mail?x=1", [(b"x-a", b"1")], b'{"to":1}')
        assert (response.status, response.body) == (200, b"ok")
        assert (b"Content-Length", b"2") in response.headers
    assert server.connections == 1
    host = server.url.removeprefix("http://").encode()
    assert server.requests[0] == (
        b"POST /v1/mail?x=1 HTTP/1.1\r\nhost: " + host + b"\r\nx-a: 1\r\n"
        b"content-length: 8\r\n\r\n" + b'{"to":1}'
    )
    await upstream.close()


async def test_a_chunked_answer_is_read_whole(serve: Serve) -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
    )
    server = await serve(always(chunked))
    upstream = Upstream(server.url)
    first = await upstream.request("GET", "/a", [], b"")
    second = await upstream.request("GET", "/b", [], b"")
    assert (first.status, first.body) == (201, b"abcdefg")
    assert second.body == b"abcdefg"
    assert server.connections == 1  # chunked framing leaves the connection reusable
    assert b"content-length" not in server.requests[0]  # a GET without a body has none
    await upstream.close()


async def test_a_body_that_runs_to_the_end_of_the_connection_is_whole(serve: Serve) -> None:
    server = await serve(always(b"HTTP/1.0 200 OK\r\nX: y\r\n\r\nuntil the end", close=True))
    upstream = Upstream(server.url)
    for _ in range(2):
        response = await upstream.request("POST", "/", [], b"")
        assert response.body == b"until the end"
    assert server.connections == 2  # HTTP/1.0 without keep-alive: one connection each
    assert upstream.idle == 0
    assert b"content-length: 0\r\n" in server.requests[0]  # a POST always says its length
    await upstream.close()


async def test_connection_close_is_honoured(serve: Serve) -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    server = await serve(always(closing))
    upstream = Upstream(server.url)
    await upstream.request("GET", "/", [], b"")
    await upstream.request("GET", "/", [], b"")
    assert server.connections == 2
    await upstream.close()


async def test_a_head_answer_has_no_body_even_with_a_length(serve: Serve) -> None:
    server = await serve(always(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"))
    upstream = Upstream(server.url)
    response = await upstream.request("HEAD", "/", [], b"")
    assert (response.status, response.body) == (200, b"")
    assert (b"Content-Length", b"1234") in response.headers
    await upstream.close()


async def test_an_interim_answer_is_skipped_for_the_final_one(serve: Serve) -> None:
    server = await serve(always(b"HTTP/1.1 100 Continue\r\n\r\n" + OK))
    upstream = Upstream(server.url)
    response = await upstream.request("PUT", "/", [], b"x")
    assert (response.status, response.body) == (200, b"ok")
    assert not any(name == b"Continue" for name, _ in response.headers)
    await upstream.close()


async def test_a_connection_the_upstream_closed_while_idle_is_not_reused(serve: Serve) -> None:
    # Announces keep-alive, then closes: the pooled connection sees its end while idle.
    server = await serve(always(OK, close=True))
    upstream = Upstream(server.url)
    await upstream.request("GET", "/", [], b"")
    while upstream.idle:  # until the close reaches the client's event loop
        await asyncio.sleep(0.001)
    response = await upstream.request("GET", "/", [], b"")
    assert response.body == b"ok"
    assert server.connections == 2
    await upstream.close()


async def test_a_connection_idle_past_the_idle_timeout_is_not_reused(serve: Serve) -> None:
    server = await serve(always(OK))
    upstream = Upstream(server.url, idle_timeout=0.0)
    await upstream.request("GET", "/", [], b"")
    await upstream.request("GET", "/", [], b"")
    assert server.connections == 2
    await upstream.close()


async def test_an_answer_cut_short_says_the_request_left(serve: Serve) -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"
    server = await serve(always(cut, close=True))
    upstream = Upstream(server.url)
    with pytest.raises(ConnectionClosed) as caught:
        await upstream.request("POST", "/", [], b"{}")
    assert caught.value.sent
    assert server.requests  # it did arrive
    await upstream.close()


async def test_an_unreadable_answer_is_a_bad_response(serve: Serve) -> None:
    server = await serve(always(b"SMTP ready\r\n\r\n"))
    upstream = Upstream(server.url)
    with pytest.raises(BadResponse) as caught:
        await upstream.request("POST", "/", [], b"{}")
    assert caught.value.sent
    await upstream.close()


async def test_no_answer_in_time_is_a_timeout_after_sending(serve: Serve) -> None:
    server = await serve(always(b""))  # reads the request, never answers
    upstream = Upstream(server.url, timeout=0.05)
    with pytest.raises(UpstreamTimeout) as caught:
        await upstream.request("POST", "/", [], b"{}")
    assert caught.value.sent and isinstance(caught.value, TimeoutError)
    assert server.requests
    await upstream.close()


async def test_a_refused_connection_says_nothing_was_sent() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()  # nothing listens on the port any more
    upstream = Upstream(f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectFailed) as caught:
        await upstream.request("POST", "/", [], b"{}")
    assert not caught.value.sent


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/a\r\nx: y", []),
        ("/a b", []),
        ("/", [(b"x", b"1\r\nInjected: 1")]),
        ("/", [(b"x", b"\n")]),
    ],
)
async def test_a_request_that_would_split_is_refused_unsent(
    serve: Serve, target: str, headers: list[tuple[bytes, bytes]]
) -> None:
    server = await serve(always(OK))
    upstream = Upstream(server.url)
    with pytest.raises(BadRequest) as caught:
        await upstream.request("POST", target, headers, b"")
    assert not caught.value.sent
    assert server.connections == 0
    await upstream.close()


def _self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh certificate for 127.0.0.1, and a client context
    that trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp / "cert.pem").write_bytes(pem)
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    client = ssl.create_default_context(cadata=pem.decode())
    return server, client


async def test_an_https_upstream_is_reached_over_tls(serve: Serve, tmp_path: Path) -> None:
    server_tls, client_tls = _self_signed(tmp_path)
    server = await serve(always(OK), server_tls)
    upstream = Upstream(server.url, ssl_context=client_tls)
    for _ in range(2):
        response = await upstream.request("POST", "/pay", [], b"{}")
        assert (response.status, response.body) == (200, b"ok")
    assert server.connections == 1
    await upstream.close()


async def test_an_untrusted_certificate_says_nothing_was_sent(serve: Serve, tmp_path: Path) -> None:
    server_tls, _ = _self_signed(tmp_path)
    server = await serve(always(OK), server_tls)
    upstream = Upstream(server.url)  # the system's trust store: the certificate is unknown
    with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED") as caught:
        await upstream.request("POST", "/pay", [], b"{}")
    assert not caught.value.sent
    assert server.requests == []
    await upstream.close()
