"""A run as an operator sees it: every sealed (encrypted) value opened with the
configured key, else shown as sealed with its key id (``serialization.reveal``).

Every surface that shows or exports what a run recorded (``perdure runs
list/show/export``, ``perdure runs prune --export``, the console) goes through here, so
an operator holding the key sees the same values everywhere and one without it sees
ciphertext markers everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from perdure._records import Event, RunInfo
from perdure._serialization import reveal

__all__ = ["revealed_events", "revealed_run"]


def revealed_run(info: RunInfo) -> RunInfo:
    return dataclasses.replace(
        info,
        input=reveal(info.input),
        result=reveal(info.result),
        error=reveal(info.error),
        attention=reveal(info.attention),
        details=reveal(info.details),
    )


def revealed_events(events: Sequence[Event]) -> list[Event]:
    return [dataclasses.replace(ev, data=reveal(ev.data)) for ev in events]
