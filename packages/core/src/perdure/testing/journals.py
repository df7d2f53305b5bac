"""A ``Journal`` kept in lists: the least a backend must supply to ``spi.drive``, for
unit tests of the shared run semantics (never a store: nothing here survives a crash)."""

from __future__ import annotations

from collections.abc import Sequence

from perdure._errors import LeaseLostError
from perdure._records import NewEvent, SignalRecord
from perdure._store import RunUpdate


class ListJournal:
    """Every ``append`` is kept as one batch, with the run update it carried.

    ``lost_after``: after that many appends, the next raises ``LeaseLostError``, as a
    backend whose run another owner took."""

    def __init__(self, run_id: str, lost_after: int | None = None) -> None:
        self.run_id = run_id
        self.url = "memory://"
        self.cancel_requested = False
        self.draining = False
        self.appended: list[list[NewEvent]] = []
        self.updates: list[RunUpdate | None] = []
        self.lost_after = lost_after

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        if self.lost_after is not None and len(self.appended) >= self.lost_after:
            raise LeaseLostError(f"run {self.run_id!r}: another owner took it")
        self.appended.append(list(events))
        self.updates.append(update)

    async def next_signal(self, name: str) -> SignalRecord | None:
        return None
