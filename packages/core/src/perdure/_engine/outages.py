"""Riding out a substrate that is away: the unwinding signal, backoff, and the log.

A store call of a drive that fails *transiently* (``perdure._errors``) unwinds the
workflow with ``SubstrateFault`` — a ``BaseException``, so the workflow's own
``except Exception`` cannot swallow it and it is never recorded as the run's failure —
and the engine drives the run again after a capped, jittered backoff. A *permanent*
substrate error unwinds the same way and parks the run, naming what and where.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

from perdure._errors import Fault
from perdure._semantics.context import Drained

__all__ = ["Backoff", "Drained", "OutageLog", "SubstrateFault"]


class SubstrateFault(BaseException):
    """Unwinds a drive whose store call failed; nothing more is written by it."""

    def __init__(self, error: BaseException, fault: Fault) -> None:
        super().__init__(f"{fault}: {error}")
        self.error = error
        self.fault = fault

    @property
    def transient(self) -> bool:
        return self.fault == "transient"


@dataclass(slots=True)
class Backoff:
    """Exponential delays from ``initial`` to ``cap`` seconds, each jittered to between
    half and all of its value, so many waiting workers do not return in lockstep."""

    initial: float = 0.05
    cap: float = 5.0
    factor: float = 2.0
    _next: float = field(default=0.0, init=False)

    def delay(self) -> float:
        base = self._next or self.initial
        self._next = min(base * self.factor, self.cap)
        return base * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._next = 0.0


@dataclass(slots=True)
class OutageLog:
    """Logs a substrate going away once, and its return once, not every retry."""

    logger: logging.Logger
    what: str
    down_since: float | None = None

    def down(self, error: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.logger.warning(
                "%s is unavailable; retrying with backoff until it is back: %s", self.what, error
            )

    def up(self) -> None:
        if self.down_since is not None:
            away = time.monotonic() - self.down_since
            self.down_since = None
            self.logger.warning("%s is back after %.1fs; resuming", self.what, away)
