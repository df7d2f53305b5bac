"""The figures of the summary bar (console) and ``perdure stats`` (CLI): counts by
status, the run that has waited longest, suspended runs by signal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from perdure._records import RunInfo, RunStatus

#: Runs someone or something has to act on; their age is how long they have waited.
WAITING = (RunStatus.SUSPENDED, RunStatus.NEEDS_ATTENTION)


@dataclass(frozen=True, slots=True)
class Summary:
    counts: dict[RunStatus, int]
    total: int
    #: The runs read were the newest ``total`` of more: counts cover those only.
    truncated: bool
    oldest_waiting: RunInfo | None
    oldest_age: float
    waiting_by_signal: dict[str, int] = field(default_factory=lambda: {})


def summarize(runs: Sequence[RunInfo], now: float, truncated: bool = False) -> Summary:
    counts = Counter(info.status for info in runs)
    waiting = [info for info in runs if info.status in WAITING]
    oldest = min(waiting, key=lambda info: info.updated_at, default=None)
    by_signal = Counter(
        info.waiting_for
        for info in runs
        if info.status is RunStatus.SUSPENDED and info.waiting_for is not None
    )
    return Summary(
        counts={s: counts.get(s, 0) for s in RunStatus},
        total=len(runs),
        truncated=truncated,
        oldest_waiting=oldest,
        oldest_age=0.0 if oldest is None else max(0.0, now - oldest.updated_at),
        waiting_by_signal=dict(sorted(by_signal.items())),
    )
