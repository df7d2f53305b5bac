"""What one drive reports to metrics and traces: the engine's single observer.

The driver makes one ``DriveObserver`` per drive and tells it three things: the drive
began (with the run record), a batch of history was written (and how long the store
took), the drive ended (with the status written, or the error that stopped it).
Everything else (which figures, which spans) is decided in ``perdure.metrics`` and
``perdure.tracing``; with neither enabled each call is a few attribute reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from perdure import metrics, tracing
from perdure.records import NewEvent, RunInfo, RunStatus


class DriveObserver:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._span: tracing.DriveSpan | None = None

    def began(self, info: RunInfo) -> None:
        if tracing.enabled():
            self._span = tracing.DriveSpan(info.run_id, info.workflow, info.details)

    def appended(self, events: Sequence[NewEvent], seconds: float) -> None:
        metrics.observe_append(events, seconds)
        if self._span is not None:
            self._span.appended(events)

    def ended(self, status: RunStatus | None, error: BaseException | None = None) -> None:
        if error is not None:
            metrics.observe_drive_failure(error)
        if self._span is not None:
            outcome = "error" if error is not None else status.value if status else "lease-lost"
            self._span.end(outcome, error)
            self._span = None
