"""``OneWriteTransport`` (the gateway's uvicorn protocol writes each response once): what
is written in one pass of the event loop leaves in one write of the real transport, in
order, and nothing held is lost on ``close`` or ``flush``. Over a real TCP connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from perdure._gateway.one_write import OneWriteTransport


@dataclass
class Counted:
    """The real transport, with the writes made to it recorded."""

    transport: asyncio.Transport
    writes: list[bytes] = field(default_factory=lambda: [])

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


@dataclass
class Pair:
    """A loopback connection: ``held`` writes to ``reader``; ``counted`` sees the writes."""

    held: OneWriteTransport
    counted: Counted
    reader: asyncio.StreamReader


class _Server(asyncio.Protocol):
    def __init__(self, made: asyncio.Future[asyncio.Transport]) -> None:
        self._made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made.set_result(transport)  # type: ignore[arg-type]


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    loop = asyncio.get_running_loop()
    made: asyncio.Future[asyncio.Transport] = loop.create_future()
    server = await loop.create_server(lambda: _Server(made), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    counted = Counted(await made)
    yield Pair(OneWriteTransport(counted), counted, reader)  # type: ignore[arg-type]
    writer.close()
    server.close()


async def test_writes_in_one_pass_leave_as_one(pair: Pair) -> None:
    pair.held.write(b"HTTP/1.1 200 OK\r\n")
    pair.held.write(b"content-length: 2\r\n\r\n")
    pair.held.write(b"ok")
    assert pair.counted.writes == []  # held until the end of this pass
    expected = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    assert await pair.reader.readexactly(len(expected)) == expected
    assert pair.counted.writes == [expected]


async def test_writes_in_later_passes_leave_separately_in_order(pair: Pair) -> None:
    pair.held.write(b"one")
    assert await pair.reader.readexactly(3) == b"one"
    pair.held.write(b"two")
    assert await pair.reader.readexactly(3) == b"two"
    assert pair.counted.writes == [b"one", b"two"]


async def test_flush_sends_what_is_held_at_once(pair: Pair) -> None:
    pair.held.write(b"a")
    pair.held.write(b"b")
    pair.held.flush()
    assert pair.counted.writes == [b"ab"]
    pair.held.flush()  # nothing held: nothing written, the scheduled flush is a no-op
    assert await pair.reader.readexactly(2) == b"ab"
    assert pair.counted.writes == [b"ab"]


async def test_close_sends_what_is_held_first(pair: Pair) -> None:
    pair.held.write(b"last words")
    pair.held.close()
    assert await pair.reader.read() == b"last words"  # then the end of the stream
    assert pair.counted.writes == [b"last words"]
