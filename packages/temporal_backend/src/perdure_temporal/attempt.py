"""One attempt of the drive activity, handed from the worker's loop to the application's.

Temporal runs an activity on the loop of the worker that took it. A process's worker
thread runs the ``perdure.run`` workflow tasks and the ``perdure.drive`` activity on one
Temporal worker, so that Temporal starts a drive eagerly, in its reply to the workflow
task that scheduled it (no activity poll, no matching; bare Temporal activities start
that way too). The drive itself runs on the application's loop, where the agent's
clients, locks and tasks belong. ``relay`` runs it there; ``Attempt`` carries across
what the drive needs of the activity, through the public ``temporalio.activity`` API
called on the loop that owns the activity: its info, its heartbeats, its cancellation
with Temporal's reason, and the worker's shutdown.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

T = TypeVar("T")

#: ``ApplicationError.type`` of a drive attempt that stopped for a transient reason.
INTERRUPTED = "PerdureDriveInterrupted"


class Attempt:
    """The activity attempt a drive runs in, as the drive's loop sees it."""

    def __init__(self) -> None:
        # Built inside the activity, on its loop: the context holds the activity's.
        self.info: activity.Info = activity.info()
        self._loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()
        #: Why Temporal cancelled the attempt, set before the drive's task is cancelled.
        self.cancellation: activity.ActivityCancellationDetails | None = None
        #: Set (on the drive's loop) when the worker begins to shut down.
        self.shutdown = asyncio.Event()

    def heartbeat(self, details: Any) -> None:
        """Record a heartbeat, from any thread, in order: a heartbeat sent before the
        drive ends reaches the activity's loop before the drive's outcome does. Once the
        worker's loop is closed the attempt is gone with it: nothing to send."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(activity.heartbeat, details, context=self._context)

    def run_cancelled(self) -> bool:
        """The attempt was cancelled by its workflow: the run is cancelled."""
        details = self.cancellation
        if details is None or not details.cancel_requested:
            return False
        return not (
            details.timed_out
            or details.not_found
            or details.worker_shutdown
            or details.reset
            or details.paused
        )

    def timed_out(self) -> bool:
        """The attempt was cancelled because Temporal no longer runs it (it timed out)."""
        details = self.cancellation
        return details is not None and (details.timed_out or details.not_found)


async def relay(
    loop: asyncio.AbstractEventLoop,
    body: Callable[[Attempt], Coroutine[Any, Any, T]],
) -> T:
    """Run ``body(attempt)`` on ``loop`` (the application's; it may be this one) as
    this activity: each cancellation of the activity cancels its task there, with
    Temporal's reason in ``attempt.cancellation``; the worker's shutdown sets
    ``attempt.shutdown``; its outcome (a result, an exception, a cancellation) is the
    activity's."""
    attempt = Attempt()
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
    tasks: list[asyncio.Task[T]] = []

    def start() -> None:
        task = loop.create_task(body(attempt), name=f"perdure-attempt-{attempt.info.workflow_id}")
        tasks.append(task)
        task.add_done_callback(lambda done: _copy_outcome(done, outcome))

    def cancel(details: activity.ActivityCancellationDetails | None) -> None:
        attempt.cancellation = details
        tasks[0].cancel()  # ``start`` ran first: one loop runs its callbacks in order

    _send(loop, start)
    shutdown = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    shutdown.add_done_callback(
        lambda f: None if f.cancelled() else _send(loop, attempt.shutdown.set, quiet=True)
    )
    waited = asyncio.wrap_future(outcome)
    try:
        while True:
            try:
                return await asyncio.shield(waited)
            except asyncio.CancelledError:
                if waited.done():
                    return waited.result()
                _send(loop, cancel, activity.cancellation_details())
    finally:
        shutdown.cancel()


def _send(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any, quiet: bool = False
) -> None:
    """``callback(*args)`` on ``loop``. A closed loop (the application's ended while
    Temporal still ran the activity) cannot drive: the attempt fails, and Temporal
    retries it on a worker that can."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError as exc:
        if not quiet:
            raise ApplicationError(
                f"the event loop that runs this process's drives is closed: {exc}",
                type=INTERRUPTED,
            ) from None


def _copy_outcome(task: asyncio.Task[T], outcome: concurrent.futures.Future[T]) -> None:
    if task.cancelled():
        outcome.cancel()
    elif (exc := task.exception()) is not None:
        outcome.set_exception(exc)
    else:
        outcome.set_result(task.result())


__all__ = ["INTERRUPTED", "Attempt", "relay"]
