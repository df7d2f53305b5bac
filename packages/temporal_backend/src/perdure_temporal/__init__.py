"""perdure backend on a Temporal cluster: ``temporal://host:7233/namespace?task_queue=...``.

Each run is a ``perdure.run`` Temporal workflow holding the run's history; perdure's
engine drives the agent in whichever worker holds the run's lease and records each
step as one fenced Temporal update. See ``store.py`` and ``journal.py``.
"""

from __future__ import annotations

from perdure.engine.backend import EmbeddedBackend
from perdure.records import RunInfo, RunStatus
from perdure_temporal.store import TemporalStore
from perdure_temporal.url import TemporalUrl

__all__ = ["TemporalBackend", "TemporalStore", "TemporalUrl", "open_backend"]


class TemporalBackend(EmbeddedBackend):
    """perdure's engine with a Temporal cluster as its store."""

    store: TemporalStore

    def __init__(self, store: TemporalStore) -> None:
        super().__init__(store)

    async def _held_runs(self) -> list[RunInfo]:
        # Only the runs visibility shows as held: reading every run each poll would not
        # scale; each candidate is still read exactly.
        return await self.store.list_runs(
            statuses=(RunStatus.RUNNING, RunStatus.PENDING),
            limit=10_000,
            candidates="ExecutionStatus = 'Running' AND PerdureStatus IN ('running', 'pending')",
        )


def open_backend(url: str) -> TemporalBackend:
    """The engine on the Temporal cluster, namespace and task queue ``url`` names."""
    return TemporalBackend(TemporalStore(url))
