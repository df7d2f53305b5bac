"""Serving an ASGI app of the gateway with uvicorn on an address given as HOST:PORT.

The socket is bound before uvicorn starts, so ``:0`` picks a free port and the line
printed once the app's startup (the ledger opened) is done names the real one: a
supervisor or a test reads that line instead of guessing when the gateway is ready.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable

from perdure._errors import ConfigurationError


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigurationError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8780")
    return host.strip("[]"), int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they
    # are TCP, and accepted sockets inherit it. Without it, Nagle holds a response's body
    # back behind its headers until the client's delayed ACK: ~40 ms per call.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"--listen {listen!r}: cannot bind: {exc.strerror}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def serve(app: object, sock: socket.socket, ready: Callable[[str], str]) -> None:
    """Serve ``app`` on ``sock`` until interrupted; print ``ready(address)`` once started."""
    import uvicorn

    from perdure._gateway.one_write import OneWriteProtocol

    host, port = sock.getsockname()[:2]
    address = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # the app's lifespan startup (the ledger) succeeded
                sys.stdout.write(ready(address) + "\n")
                sys.stdout.flush()

    # A proxy forwards the upstream's Date and Server headers; uvicorn's own would be
    # duplicates. X-Forwarded-* is the upstream's to read, not this server's.
    config = uvicorn.Config(
        app,  # pyright: ignore[reportArgumentType]
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=OneWriteProtocol,
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )
    _Server(config).run(sockets=[sock])
