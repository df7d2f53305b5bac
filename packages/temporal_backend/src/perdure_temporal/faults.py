"""Which Temporal errors are transient, and riding them out.

A loaded worker or a restarting server shows as states that pass by themselves:
``WorkflowNotReady`` (the workflow's first task has not completed, or its last one
failed and is being retried), "Workflow Task in failed state" on a query, an update
whose RPC timed out (``WorkflowUpdateRPCTimeoutOrCancelledError``), ``UNAVAILABLE`` and
``DEADLINE_EXCEEDED``, a connection that no server answered yet (it is restarting or not
up: the SDK raises a ``RuntimeError`` saying so), and a pin to a code version whose
workers' first poll the server has not registered yet (``versioning.py``). None of them
says anything about the run: the call is sent again (an update with the same update id,
which Temporal applies at most once), with capped, jittered backoff, and only after
``budget`` seconds does the caller see a ``BackendUnavailableError`` — never the
workflow's code.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from perdure.spi import BackendUnavailableError, Fault, register_classifier
from perdure_temporal.versioning import version_not_polled_yet

log = logging.getLogger("perdure.temporal")

_T = TypeVar("_T")

#: Seconds a call keeps being retried through transient states before it gives up.
DEFAULT_BUDGET = 120.0

_TRANSIENT_CODES = (
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.ABORTED,
    RPCStatusCode.CANCELLED,
)
#: What Temporal says (FAILED_PRECONDITION, or a failed query) while a workflow task
#: is being retried or has not run yet.
_TRANSIENT_TEXT = ("workflow task in failed state", "not ready", "workflownotready")
#: What ``Client.connect`` says when nothing answers at the address (refused, reset,
#: unavailable): a server restarting or not up yet. Not a TLS or credential failure.
_UNREACHABLE_TEXT = (
    "tcp connect error",
    "connection refused",
    "connectionrefused",
    "connection reset",
    "unavailable",
)


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is ``Client.connect`` finding no server answering."""
    text = str(exc).lower()
    return (
        isinstance(exc, RuntimeError)
        and "failed client connect" in text
        and any(t in text for t in _UNREACHABLE_TEXT)
    )


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a passing state of the server or of a workflow task."""
    if isinstance(exc, WorkflowUpdateRPCTimeoutOrCancelledError | TimeoutError):
        return True
    if isinstance(exc, RPCError):
        if exc.status in _TRANSIENT_CODES or version_not_polled_yet(exc):
            return True
        text = exc.message.lower()
        return exc.status is RPCStatusCode.FAILED_PRECONDITION and any(
            t in text for t in _TRANSIENT_TEXT
        )
    if isinstance(exc, WorkflowQueryFailedError):
        return any(t in str(exc).lower() for t in _TRANSIENT_TEXT)
    return is_unreachable(exc)


def temporal_fault(exc: BaseException) -> Fault | None:
    """perdure's classifier hook (``perdure.spi.register_classifier``) for Temporal."""
    return "transient" if is_transient(exc) else None


register_classifier(temporal_fault)


async def ride_out(
    what: str, call: Callable[[], Awaitable[_T]], *, budget: float = DEFAULT_BUDGET
) -> _T:
    """``call()``, sent again while it fails transiently, for up to ``budget`` seconds."""
    deadline = time.monotonic() + budget
    delay = 0.05
    logged = False
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise BackendUnavailableError(
                    f"{what}: Temporal stayed unavailable for {budget:g}s ({exc})"
                ) from exc
            if not logged:  # once per outage, not once per retry
                log.info("%s: transient Temporal state (%s); retrying", what, exc)
                logged = True
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, 2.0)
