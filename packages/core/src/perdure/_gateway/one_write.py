"""One socket write per response, for the gateway served by uvicorn.

uvicorn writes a response's status line and headers as soon as the app starts the
response, and its body in a second write: two ``send`` syscalls and, on loopback, two
wake-ups of the caller for every answer (py-spy put the pair at ~13% of the gateway's
CPU per forwarded call). ``OneWriteTransport`` holds what is written and sends it as
one: at once when the response is complete (``OneWriteProtocol``), else at the end of
the event loop's current pass. Nothing waits longer than that pass, and the order of
the bytes is kept; ``close`` sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class OneWriteTransport:
    """Wraps a transport: writes made in one pass of the loop leave in one ``write``."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def flush(self) -> None:
        if self._held:
            data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held.clear()
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.flush()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a ``OneWriteTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        self._one_write = OneWriteTransport(transport)
        super().connection_made(self._one_write)  # pyright: ignore[reportArgumentType]

    def on_response_complete(self) -> None:
        # The whole response is written: send it now, not after whatever else this pass
        # of the loop runs (the gateway records the answer right after answering).
        self._one_write.flush()
        super().on_response_complete()
