"""The gateway's rule (``Once``) over a real SQLite ledger: the caller gets the answer
before it is recorded, a retry in between waits for the record (the upstream is not
called again), and ``drain`` (called when the gateway stops) waits for the record so a
graceful stop leaves no outcome unknown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from perdure._gateway.ledger import Ledger, open_ledger
from perdure._gateway.once import Once
from perdure._gateway.records import StoredResponse

ANSWER = StoredResponse(200, (("content-type", "text/plain"),), b"sent", 4)


class HeldLedger(Ledger):
    """The real ledger, whose recording of an answer waits for ``release``."""

    def __init__(self, inner: Ledger) -> None:
        super().__init__(inner.db)
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def finish(self, *args: object, **kwargs: object) -> bool:
        self.holding.set()
        await self.release.wait()
        return await super().finish(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[HeldLedger]:
    held = HeldLedger(open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}"))
    await held.open()
    yield held
    await held.close()


async def test_the_answer_comes_before_its_record_and_a_retry_waits_for_it(
    ledger: HeldLedger,
) -> None:
    once = Once(ledger)
    sent: list[str] = []

    async def send() -> StoredResponse:
        sent.append("mail")
        return ANSWER

    first = await once.call("recv", "k", "fp", send)  # returns with the record held
    assert (first.response, first.replayed) == (ANSWER, False)
    attempt = await ledger.get("recv", "k")
    assert attempt is not None and attempt.state == "in_flight"

    retry = asyncio.ensure_future(once.call("recv", "k", "fp", send))
    while not once.status()["waiting"]:  # the retry found the attempt in flight
        await asyncio.sleep(0.001)
    assert not retry.done()
    ledger.release.set()
    again = await retry
    assert (again.response, again.replayed) == (ANSWER, True)
    assert sent == ["mail"]


async def test_drain_waits_until_every_handed_answer_is_recorded(ledger: HeldLedger) -> None:
    once = Once(ledger)

    async def send() -> StoredResponse:
        return ANSWER

    await once.call("recv", "k", "fp", send)
    drained = asyncio.ensure_future(once.drain())
    await ledger.holding.wait()  # the answer's record is being written, and held
    for _ in range(100):  # a drain that did not wait would finish within these turns
        await asyncio.sleep(0)
    assert not drained.done()
    ledger.release.set()
    await drained
    attempt = await ledger.get("recv", "k")
    assert attempt is not None and attempt.state == "done"
    assert attempt.response == ANSWER
