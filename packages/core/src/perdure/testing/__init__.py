"""Test helpers for perdure and for anyone proving a backend against its contract.

The pytest plugin (``perdure.testing.plugin``, loaded automatically) provides the
fixtures ``perdure_url`` (one real store per parameter, chosen by
``PERDURE_TEST_STORES``), ``perdure_backend``, ``receiver`` and ``processes``.
``perdure.testing.demo`` holds the services (payments, mail relay) and the bookkeeping an
adapter's ``perdure demo`` story uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence

from perdure._backend import Backend
from perdure._records import Event, EventKind, RunInfo, RunStatus
from perdure.testing.patience import Patience
from perdure.testing.processes import Process, Processes
from perdure.testing.receivers import Receiver, post

__all__ = [
    "Patience",
    "Process",
    "Processes",
    "Receiver",
    "completed_steps",
    "post",
    "wait_for_request",
    "wait_for_status",
    "wait_for_step",
]


def completed_steps(history: Sequence[Event]) -> list[str]:
    """Keys of the completed steps in ``history``, in order."""
    return [e.step_key or "" for e in history if e.kind is EventKind.STEP_COMPLETED]


async def wait_for_step(
    backend: Backend, run_id: str, match: Callable[[str], bool], *, timeout: float = 60.0
) -> str:
    """Poll the run's history until a completed step whose key satisfies ``match`` is
    recorded (another process is driving it); return that key. Times out only after
    ``timeout`` seconds in which the history did not grow (``Patience``)."""
    patience = Patience(timeout)
    while True:
        history = await _history(backend, run_id)
        for key in completed_steps(history):
            if match(key):
                return key
        patience.observe(len(history))
        if patience.expired():
            raise TimeoutError(
                f"no matching step recorded in run {run_id!r}: its history stayed at "
                f"{len(history)} event(s) for {timeout}s ({patience.waited():.0f}s in all)"
            )
        await asyncio.sleep(0.02)


async def wait_for_status(
    backend: Backend, run_id: str, statuses: Collection[RunStatus], *, timeout: float = 60.0
) -> RunInfo:
    """Poll the backend until the run reaches one of ``statuses`` (it may not exist yet).
    Times out only after ``timeout`` seconds in which the run did not change: neither
    its status nor its history (``Patience``)."""
    patience = Patience(timeout)
    last: RunInfo | None = None
    while True:
        try:
            last = await backend.get_run(run_id)
        except LookupError:
            last = None
        if last is not None and last.status in statuses:
            return last
        length = len(await _history(backend, run_id)) if last is not None else -1
        patience.observe((None if last is None else last.status, length))
        if patience.expired():
            state = "absent" if last is None else last.status.value
            raise TimeoutError(
                f"run {run_id!r} is {state}, not {'/'.join(s.value for s in statuses)}, "
                f"and did not change for {timeout}s ({patience.waited():.0f}s in all)"
            )
        await asyncio.sleep(0.02)


async def wait_for_request(
    backend: Backend, run_id: str, *, after: str | None = None, timeout: float = 60.0
) -> str:
    """Poll until the run waits on an approval request (other than ``after``, the one
    just answered); return its id (``RunInfo.request_id``). Times out only after
    ``timeout`` seconds in which the run did not change (``Patience``)."""
    patience = Patience(timeout)
    while True:
        try:
            info: RunInfo | None = await backend.get_run(run_id)
        except LookupError:
            info = None
        if info is not None and info.request_id is not None and info.request_id != after:
            return info.request_id
        length = len(await _history(backend, run_id)) if info is not None else -1
        patience.observe((None if info is None else info.status, length))
        if patience.expired():
            shown = "absent" if info is None else f"{info.status.value} ({info.request_id})"
            raise TimeoutError(
                f"run {run_id!r} is {shown}: no new approval request, and the run did not "
                f"change for {timeout}s ({patience.waited():.0f}s in all)"
            )
        await asyncio.sleep(0.02)


async def _history(backend: Backend, run_id: str) -> Sequence[Event]:
    try:
        return await backend.history(run_id)
    except LookupError:
        return []
