"""Test helpers for perdure and for anyone proving a backend against its contract.

The pytest plugin (``perdure.testing.plugin``, loaded automatically) provides the
fixtures ``perdure_url`` (one real store per parameter, chosen by
``PERDURE_TEST_STORES``), ``perdure_backend``, ``receiver`` and ``processes``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection

from perdure.backend import Backend
from perdure.records import RunInfo, RunStatus
from perdure.testing.processes import Process, Processes
from perdure.testing.receivers import Receiver, post

__all__ = ["Process", "Processes", "Receiver", "post", "wait_for_status"]


async def wait_for_status(
    backend: Backend, run_id: str, statuses: Collection[RunStatus], *, timeout: float = 60.0
) -> RunInfo:
    """Poll the backend until the run reaches one of ``statuses`` (it may not exist yet)."""
    deadline = time.monotonic() + timeout
    last: RunInfo | None = None
    while True:
        try:
            last = await backend.get_run(run_id)
        except LookupError:
            last = None
        if last is not None and last.status in statuses:
            return last
        if time.monotonic() > deadline:
            state = "absent" if last is None else last.status.value
            raise TimeoutError(
                f"run {run_id!r} is {state}, not {'/'.join(s.value for s in statuses)}, "
                f"after {timeout}s"
            )
        await asyncio.sleep(0.02)
