"""The journal worker: applies a process's share of ``perdure.run`` workflow tasks.

It runs on a thread with its own event loop and client, so the journal keeps answering
(updates from other processes, queries of the CLI) even while the application's own
loop is busy or blocked — a worker that polls Temporal but cannot run its tasks would
hold up every run it was last given.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from perdure_temporal.journal import PerdureRun

#: How long a workflow task waits on the sticky queue of the worker that last ran the
#: workflow before any worker may take it: short, so a SIGKILLed worker costs little.
STICKY_TIMEOUT = timedelta(seconds=1)


class JournalWorker:
    """A Temporal worker for ``perdure.run`` on one task queue, on its own thread."""

    def __init__(self, target: str, namespace: str, task_queue: str) -> None:
        self.target = target
        self.namespace = namespace
        self.task_queue = task_queue
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(
            target=self._main, name=f"perdure-journal-{task_queue}", daemon=True
        )

    def start(self, timeout: float = 30.0) -> None:
        """Start polling; raise what connecting raised."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the journal worker for {self.target} did not start")
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Finish the tasks in hand and stop polling."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start() if it failed there
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        client = await Client.connect(self.target, namespace=self.namespace)
        worker = Worker(
            client,
            task_queue=self.task_queue,
            workflows=[PerdureRun],
            # The journal imports only the standard library and temporalio and never
            # reads a clock or a random source: the sandbox would only cost each task
            # (under load, enough to time tasks out).
            workflow_runner=UnsandboxedWorkflowRunner(),
            sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT,
        )
        async with worker:
            self._ready.set()
            await self._stop.wait()
