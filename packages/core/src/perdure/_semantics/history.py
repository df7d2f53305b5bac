"""A run's recorded history, indexed the way replay asks for it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from perdure._records import POSITIONAL_KINDS, Event, EventKind

__all__ = ["History"]


def position_of(step_key: str) -> str:
    """``"3:charge"`` → ``"3"``: the position part of a step key."""
    return step_key.partition(":")[0]


@dataclass(slots=True)
class History:
    """What replay needs to know of the events recorded so far."""

    #: The event standing in each step position (its result, failure, signal, timer,
    #: patch marker, or an operator's verdict).
    positional: dict[str, Event] = field(default_factory=lambda: {})
    #: Intents of non-idempotent effects whose outcome is not recorded.
    intents: dict[str, Event] = field(default_factory=lambda: {})
    #: Failed attempts per step key (the next attempt's number is one more).
    failed_attempts: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: The first suspension at each wait: when the wait began, its deadline.
    first_suspension: dict[str, Event] = field(default_factory=lambda: {})

    @classmethod
    def index(cls, events: Iterable[Event]) -> History:
        h = cls()
        for ev in events:
            key = ev.step_key
            if key is None:
                continue
            if ev.kind in POSITIONAL_KINDS:
                h.positional[position_of(key)] = ev
            elif ev.kind is EventKind.INTENT:
                h.intents[key] = ev
            elif ev.kind is EventKind.ATTEMPT_FAILED:
                h.failed_attempts[key] += 1
                h.intents.pop(key, None)  # that attempt's outcome is known: it failed
            elif ev.kind is EventKind.SUSPENDED:
                h.first_suspension.setdefault(key, ev)
            elif ev.kind is EventKind.RECONCILED:
                h.intents.pop(key, None)
                if ev.data and ev.data.get("outcome") in ("succeeded", "failed"):
                    # The operator's verdict stands in the step's position.
                    h.positional[position_of(key)] = ev
        return h
