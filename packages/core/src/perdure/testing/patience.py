"""Deadlines that move with progress, for tests on a loaded machine.

A fixed deadline fails a healthy run that is merely slow (a machine 4x loaded takes 4x
as long); waiting longer hides a run that is truly stuck. ``Patience`` times out only
after ``stall`` seconds in which what it watches did not change: a run that keeps
recording steps is given all the time it needs, one that stops moving fails as fast.
"""

from __future__ import annotations

import time
from collections.abc import Hashable


class Patience:
    """Expires ``stall`` seconds after the watched state last changed."""

    def __init__(self, stall: float) -> None:
        self.stall = stall
        self._state: Hashable = object()
        self._since = time.monotonic()
        self.began = self._since

    def observe(self, state: Hashable) -> None:
        """Report what is watched now; a change is progress and restarts the clock."""
        if state != self._state:
            self._state = state
            self._since = time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() - self._since > self.stall

    def waited(self) -> float:
        """Seconds since the wait began (for messages)."""
        return time.monotonic() - self.began
