"""``Journal``: the one thing a backend implements to run perdure's semantics.

A journal makes one drive's records durable. The semantics call it one append at a
time (never concurrently, even when the workflow runs steps in parallel tasks), in the
order the records must be kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from perdure._records import NewEvent, SignalRecord
from perdure._store import RunUpdate

__all__ = ["Journal"]


class Journal(Protocol):
    """Durability of one run's records, for the length of one drive."""

    @property
    def run_id(self) -> str: ...

    @property
    def url(self) -> str:
        """The backend URL the run lives on (``RunContext.url``)."""
        ...

    @property
    def cancel_requested(self) -> bool:
        """Whether cancellation was asked for, as of the last ``append`` (or the start
        of the drive). The semantics read it before each new step and after each
        append; a backend refreshes it when it writes."""
        ...

    @property
    def draining(self) -> bool:
        """True once this process is shutting down gracefully: the drive stops before
        its next step (``Drained`` comes out of ``drive``; what ran is recorded), so the
        backend can hand the run to another worker. A backend that never drains says
        False."""
        ...

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        """Make ``events`` durable after every event appended before, atomically.

        With ``update`` the drive ends there: apply the run's new status (suspended,
        parked or ended) and stop owning the run; a backend that schedules runs
        itself reads ``update`` to know when to drive the run again (``wake_at``, the
        signal named by ``waiting_for``). ``consume_signal`` marks that inbox signal
        taken, in the same write. Raise ``LeaseLostError`` when this drive no longer
        owns the run; any error raised stops the drive with nothing more written and
        is raised to whoever called ``drive`` (the workflow never sees it).
        """
        ...

    async def next_signal(self, name: str) -> SignalRecord | None:
        """The oldest signal ``name`` delivered to the run and not yet consumed."""
        ...
