"""The Temporal workers of one process: ``perdure.run`` workflow tasks and drives.

Workflow tasks run on a thread with its own event loop and client, so the workflow keeps
answering (updates from other processes, the CLI's cancel) even while the
application's loop is busy. Once the process drives runs, the same Temporal worker
takes the ``perdure.drive`` activity too, so Temporal starts a drive eagerly, in its
reply to the workflow task that scheduled it, as it starts bare activities; the drive
itself runs on the application's own loop, where the workflow's code expects to run
(its clients, locks and tasks belong to that loop; ``attempt.relay``). A process that
runs drives only (``role=drives``) polls for them on the application's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.common import WorkerDeploymentVersion
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from perdure_temporal.connection import connect
from perdure_temporal.versioning import deployment_config
from perdure_temporal.workflow import PerdureRun

log = logging.getLogger("perdure.temporal")

#: Seconds before a failed Temporal worker is started again, doubling up to the next.
RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
#: The longest a workflow task waits on the sticky queue of the worker that last ran
#: the workflow before any worker may take it (Temporal's SDK default).
MAX_STICKY_TIMEOUT = 10.0


def sticky_timeout(heartbeat_timeout: float) -> timedelta:
    """How long a workflow task waits on the sticky queue of the worker that last ran
    the workflow: half the drives' heartbeat timeout (1 to 10 s). A task that waits
    longer goes to the task queue, and the worker that takes it replays the workflow
    from its whole history: 1 s timed out tasks of a live worker that a loaded machine
    kept busy. A SIGKILLed worker's runs wait out the heartbeat timeout anyway; their
    next workflow task costs half of it again at most."""
    return timedelta(seconds=min(max(heartbeat_timeout / 2, 1.0), MAX_STICKY_TIMEOUT))


#: How long a stopping worker lets its drives finish the step in hand.
DRAIN_TIMEOUT = timedelta(seconds=30)


@dataclass(frozen=True)
class DriveSlots:
    """The drives one worker takes: ``concurrency`` at a time; with ``rate``, at most
    that many activities started per second on the task queue (the server enforces it
    across all workers) and by this worker."""

    drives: Any
    concurrency: int
    heartbeat_timeout: float
    rate: float | None = None

    def options(self) -> dict[str, Any]:
        """The ``Worker`` options that run these drives."""
        return {
            "activities": [self.drives.drive],
            "max_concurrent_activities": self.concurrency,
            "max_task_queue_activities_per_second": self.rate,
            "max_activities_per_second": self.rate,
            "graceful_shutdown_timeout": DRAIN_TIMEOUT,
            # The SDK sends a heartbeat at most every 0.8x the timeout by default, which
            # leaves a loaded worker a fifth of it: send one every quarter instead.
            # (Every half was tried: at load 17-24, 1,000 runs, drives' loops ran late
            # enough for heartbeat timeouts, and each retried drive loaded the machine
            # further.)
            "max_heartbeat_throttle_interval": timedelta(seconds=self.heartbeat_timeout / 4),
        }


class RunWorker:
    """A Temporal worker for ``perdure.run`` on one task queue, on its own thread; with
    ``drives``, for the drive activity too (started eagerly)."""

    def __init__(
        self,
        connect: dict[str, Any],
        task_queue: str,
        sticky: timedelta,
        version: WorkerDeploymentVersion | None = None,
        drives: DriveSlots | None = None,
    ) -> None:
        self.connect = connect
        self.task_queue = task_queue
        self.sticky = sticky
        self.version = version
        self.drives = drives
        #: The Temporal worker, once it polls.
        self.worker: Worker | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(
            target=self._main, name=f"perdure-workflows-{task_queue}", daemon=True
        )

    def start(self, timeout: float = 30.0) -> None:
        """Start polling; raise what connecting raised."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the workflow worker for {self.task_queue!r} did not start")
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Finish the tasks in hand (drives: for up to ``DRAIN_TIMEOUT``) and stop
        polling. Call it off the drives' loop: they finish there."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(DRAIN_TIMEOUT.total_seconds() + 30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start() if it failed there
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        """Poll until stopped. A Temporal worker fails for good once its polls have
        failed for a while (a server away longer than the SDK's own retries): this
        thread then starts a new one, at a growing interval, rather than leave the
        process alive with nothing polling for its runs."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        delay = RESTART_DELAY
        while not self._stop.is_set():
            try:
                await self._poll()
            except Exception as exc:
                if not self._ready.is_set():
                    raise  # start() reports it
                log.warning(
                    "the Temporal worker for task queue %r failed (%s); starting it again",
                    self.task_queue,
                    exc,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                delay = min(delay * 2, MAX_RESTART_DELAY)

    async def _poll(self) -> None:
        """One Temporal worker, until stopped (then drained) or failed (raised)."""
        assert self._stop is not None
        client = await connect(self.connect)
        worker = Worker(
            client,
            task_queue=self.task_queue,
            workflows=[PerdureRun],
            # The workflow imports only the standard library and temporalio and reads
            # time only through workflow.now(): the sandbox would only cost each task
            # (under load, enough to time tasks out).
            workflow_runner=UnsandboxedWorkflowRunner(),
            sticky_queue_schedule_to_start_timeout=self.sticky,
            max_concurrent_workflow_tasks=64,
            deployment_config=deployment_config(self.version),
            **(self.drives.options() if self.drives is not None else {}),
        )
        self.worker = worker
        running = asyncio.ensure_future(worker.run())
        stopped = asyncio.ensure_future(self._stop.wait())
        self._ready.set()
        try:
            await asyncio.wait((running, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not running.done():
            await worker.shutdown()
        await running  # its fatal error, if it failed
        if not self._stop.is_set():
            raise RuntimeError("it stopped polling by itself")


def drive_worker(
    client: Client,
    task_queue: str,
    slots: DriveSlots,
    version: WorkerDeploymentVersion | None = None,
) -> Worker:
    """A worker for the ``perdure.drive`` activity only, on the caller's loop; with
    ``version``, it polls as that version of the task queue's deployment
    (``versioning.py``)."""
    return Worker(
        client,
        task_queue=task_queue,
        # Drives of a run pinned to a code version go only to workers of that version.
        deployment_config=deployment_config(version),
        **slots.options(),
    )


async def replay_failure(history: WorkflowHistory, converter: DataConverter) -> str | None:
    """Why this process's ``perdure.run`` cannot replay ``history`` (code that changed
    the workflow's commands under a running execution), or None when it replays."""
    replayer = Replayer(
        workflows=[PerdureRun],
        workflow_runner=UnsandboxedWorkflowRunner(),
        data_converter=converter,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is None:
        return None
    return f"Temporal's Replayer: {type(result.replay_failure).__name__}: {result.replay_failure}"
