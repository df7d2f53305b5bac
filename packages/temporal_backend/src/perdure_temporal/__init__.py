"""perdure backend on a Temporal cluster: ``temporal://host:7233/namespace?task_queue=...``.

Temporal schedules, retries, times and recovers every run: each run is a ``perdure.run``
workflow (``workflow.py``) that supervises heartbeated ``perdure.drive`` activities
(``drive.py``) running perdure's replay engine, and waits with Temporal timers and
signals. ``TemporalBackend`` (``backend.py``) is what the API and the CLI talk to.
"""

from __future__ import annotations

from perdure_temporal.backend import TemporalBackend
from perdure_temporal.connection import use_payload_codec
from perdure_temporal.payloads import DirectoryPayloads, PayloadError, PayloadStore
from perdure_temporal.url import TemporalUrl

__all__ = [
    "DirectoryPayloads",
    "PayloadError",
    "PayloadStore",
    "TemporalBackend",
    "TemporalUrl",
    "open_backend",
    "use_payload_codec",
]


def open_backend(url: str) -> TemporalBackend:
    """The backend on the Temporal cluster, namespace and task queue ``url`` names."""
    return TemporalBackend(url)
