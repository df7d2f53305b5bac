"""``EmbeddedBackend``: the engine on a ``Store``, driving runs in this process."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Sequence
from typing import Any

from perdure import _metrics as metrics
from perdure import _tracing as tracing
from perdure._backend import Backend, ReconcileOutcome, RunHandle
from perdure._engine.driver import RunDriver
from perdure._engine.outages import Backoff, OutageLog, SubstrateFault
from perdure._engine.owners import new_owner_id, owner_is_dead
from perdure._errors import (
    ConfigurationError,
    CorruptHistoryError,
    RunNotFoundError,
)
from perdure._records import Event, NewEvent, RunInfo, RunStatus
from perdure._semantics import events, guards
from perdure._serialization import to_jsonable
from perdure._store import Lease, NewRun, Store
from perdure._workflow import Workflow, get_workflow, registered_workflows

log = logging.getLogger("perdure.engine")

#: A parked run stops ``wait``: someone has to act before it can go on.
STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)


class EmbeddedBackend(Backend):
    """Runs are driven by whichever process holds their lease: the one that started
    them, or a worker (``serve``) that recovered them."""

    def __init__(
        self,
        store: Store,
        *,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.5,
        replay_only: bool = False,
        grace_seconds: float = 30.0,
    ) -> None:
        if lease_seconds <= 0 or poll_interval <= 0:
            raise ConfigurationError("lease_seconds and poll_interval must be positive")
        self.store = store
        self.url = store.url
        #: Drives stop before the first step their history does not record.
        self.replay_only = replay_only
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.owner = new_owner_id()
        #: How long ``close``/``shutdown`` lets in-flight steps finish.
        self.grace_seconds = grace_seconds
        self._opened = False
        self._drives: dict[str, asyncio.Task[RunStatus | None]] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        #: One log line when the substrate goes away and one when it is back.
        self.outage = OutageLog(log, "the store")

    async def open(self) -> None:
        if not self._opened:
            await self.store.open()
            self._opened = True
            self.draining.clear()  # opened again after a drain: it takes work again

    async def close(self) -> None:
        await self.shutdown()

    async def shutdown(self, *, grace: float | None = None) -> None:
        """Drain, then close: take no new work, let each drive finish the step it is in
        and record it (for up to ``grace`` seconds, default ``grace_seconds``), release
        the leases so another worker takes the runs over at once. Only a step still
        running after the grace period is cut off (its intent stays open)."""
        self.draining.set()
        grace = self.grace_seconds if grace is None else grace
        drives = list(self._drives.values())
        if drives:
            _, late = await asyncio.wait(drives, timeout=max(grace, 0.0))
            for task in late:
                log.warning("drive %s still running after %.0fs of grace; cut off", task, grace)
                task.cancel()
            for task in late:
                with contextlib.suppress(BaseException):
                    await task
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(BaseException):
                await self._heartbeat
            self._heartbeat = None
        if self._opened:
            await self.store.close()
            self._opened = False

    # -- driving -----------------------------------------------------------------------

    def _drive(self, lease: Lease, workflow: Workflow[..., Any]) -> asyncio.Task[RunStatus | None]:
        # A fresh context: a run started from inside another run's step must not
        # inherit that run's context (its steps would look nested, hence unrecorded).
        task = asyncio.get_running_loop().create_task(
            self._drive_through_outages(lease, workflow),
            name=f"perdure-run-{lease.run_id}",
            context=contextvars.Context(),
        )
        self._drives[lease.run_id] = task
        task.add_done_callback(lambda t: asyncio.ensure_future(self._drive_done(lease, t)))
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())
        return task

    async def _drive_through_outages(
        self, lease: Lease, workflow: Workflow[..., Any]
    ) -> RunStatus | None:
        """Drive the run; each time the substrate fails under the drive, wait (capped,
        jittered backoff), take the run back under a new fence and drive it again from
        its history. Stops when the run stops, or another worker has it."""
        backoff = Backoff()
        carried: dict[str, NewEvent] = {}
        while True:
            try:
                status = await RunDriver(self, lease, workflow, carried).drive()
            except SubstrateFault as fault:
                self._lost_substrate(fault)
            else:
                self.outage.up()
                return status
            while True:
                if self.draining.is_set():
                    return None  # the lease expires; the next worker takes the run
                await asyncio.sleep(backoff.delay())
                try:
                    # break_owner: the lease is still ours; a new fence and a fresh
                    # next_seq cover writes that landed though their answer was lost.
                    taken = await self.store.acquire(
                        lease.run_id,
                        self.owner,
                        self.lease_seconds,
                        now=time.time(),
                        break_owner=self.owner,
                    )
                except RunNotFoundError:
                    return None
                except Exception as exc:
                    fault = SubstrateFault(exc, self.store.classify(exc) or "permanent")
                    self._lost_substrate(fault)
                    continue
                break
            if taken is None:
                return None  # it ended meanwhile, or another worker took it over
            lease = taken

    def _lost_substrate(self, fault: SubstrateFault) -> None:
        if fault.transient:
            self.outage.down(fault.error)
        else:
            # A permanent error even parking could not record: nothing else to do but
            # keep trying, loudly, until an operator fixes the substrate.
            log.error("the store refuses to record anything: %s; retrying", fault.error)

    async def _drive_done(self, lease: Lease, task: asyncio.Task[RunStatus | None]) -> None:
        if self._drives.get(lease.run_id) is task:
            del self._drives[lease.run_id]
        if task.cancelled():
            # This process is shutting down: give the run back for another worker.
            with contextlib.suppress(Exception):
                await self.store.release(lease)
        elif task.exception() is not None:
            log.error("drive of run %s crashed", lease.run_id, exc_info=task.exception())
        await self._notify()

    async def _beat(self) -> None:
        """Keep this process's leases alive while it drives anything."""
        while self._drives:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.store.renew(self.owner, self.lease_seconds, now=time.time())
            except Exception:
                log.warning("lease renewal failed; retrying", exc_info=True)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _wait_change(self, timeout: float) -> None:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(timeout, 0.0))

    async def _try_take(self, info: RunInfo) -> asyncio.Task[RunStatus | None] | None:
        """Drive ``info``'s run here if it is due, its workflow is known and we win it."""
        if info.run_id in self._drives:
            # A drive that has just finished is still listed until ``_drive_done`` runs;
            # handing it back would make ``wait`` loop on it without ever yielding.
            task = self._drives[info.run_id]
            return None if task.done() else task
        if self.draining.is_set():
            return None
        try:
            workflow = get_workflow(info.workflow)
        except LookupError:
            return None
        now = time.time()
        dead = info.owner if info.owner and owner_is_dead(info.owner) else None
        lease = await self.store.acquire(
            info.run_id, self.owner, self.lease_seconds, now=now, break_owner=dead
        )
        return None if lease is None else self._drive(lease, workflow)

    # -- Backend -----------------------------------------------------------------------

    async def start(
        self,
        workflow: Workflow[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str,
        parent_run_id: str | None = None,
    ) -> RunHandle:
        await self.open()
        new = NewRun(
            run_id,
            workflow.name,
            events.encode_input(run_id, args, kwargs),
            workflow.code_version,
            parent_run_id,
            details=tracing.start_context(run_id, workflow.name),
        )
        _, lease = await self.store.create_run(new, self.owner, self.lease_seconds)
        if lease is not None:
            if self.draining.is_set():
                await self.store.release(lease)  # shutting down: for another worker
            else:
                self._drive(lease, workflow)
        return RunHandle(self, run_id)

    async def get_run(self, run_id: str) -> RunInfo:
        await self.open()
        return await self.store.get_run(run_id)

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        older_than: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        await self.open()
        before = None if older_than is None else time.time() - older_than
        return await self.store.list_runs(
            statuses=statuses, updated_before=before, workflow=workflow, limit=limit
        )

    async def history(self, run_id: str) -> list[Event]:
        await self.open()
        return await self.store.load_history(run_id)

    async def _signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> None:
        await self.open()
        data = to_jsonable(payload, f"payload of signal {name!r} to run {run_id!r}")
        await self.store.deliver_signal(
            run_id, name, data, by, now=time.time(), authorization=authorization
        )
        await self._notify()

    async def _cancel(self, run_id: str) -> RunInfo:
        await self.open()
        info = await self.store.request_cancel(run_id, now=time.time())
        await self._notify()
        return info

    async def _resume(
        self,
        run_id: str,
        *,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> RunInfo:
        await self.open()
        guards.check_can_resume(await self.store.get_run(run_id))
        info = await self.store.admin_append(
            run_id,
            [events.resumed(by=by, authorization=authorization)],
            expect=guards.RESUMABLE,
            status=RunStatus.SUSPENDED,
            now=time.time(),
        )
        await self._notify()
        return info

    async def _reconcile(
        self,
        run_id: str,
        step_key: str,
        outcome: ReconcileOutcome,
        *,
        result: Any = None,
        message: str | None = None,
        by: str | None = None,
        authorization: dict[str, Any] | None = None,
    ) -> RunInfo:
        await self.open()
        guards.check_can_reconcile(await self.store.get_run(run_id), step_key)
        verdict = events.reconciled(
            step_key, outcome, result=result, message=message, by=by, authorization=authorization
        )
        info = await self.store.admin_append(
            run_id,
            [verdict],
            expect=guards.RECONCILABLE,
            status=RunStatus.SUSPENDED,
            now=time.time(),
        )
        await self._notify()
        return info

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        await self.open()
        return await self.store.delete_finished(run_ids)

    async def wait(
        self, run_id: str, *, timeout: float | None = None, drive: bool = True
    ) -> RunInfo:
        await self.open()
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Backoff()
        while True:
            task = self._drives.get(run_id)
            if task is not None:
                await asyncio.shield(task)
            try:
                info = await self.store.get_run(run_id)
                if info.status in STOPPED:
                    return info
                if drive and await self._try_take(info) is not None:
                    continue
            except Exception as exc:
                if self.store.classify(exc) != "transient" or not self._opened:
                    raise
                self.outage.down(exc)  # ride it out: the run is still there
                pause = backoff.delay()
            else:
                self.outage.up()
                backoff.reset()
                pause = self.poll_interval
                if info.wake_at is not None:
                    pause = min(pause, info.wake_at - time.time())
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"run {run_id!r} is not finished after {timeout}s")
                pause = min(pause, left)
            await self._wait_change(pause)

    async def serve(
        self,
        *,
        stop: asyncio.Event,
        concurrency: int = 100,
        queue: str | None = None,
        rate: float | None = None,
    ) -> None:
        """Recover and drive due runs until ``stop``; rides out substrate outages (capped,
        jittered backoff, one log line when the store goes away and one when it is back)."""
        self.refuse_queue_options(queue, rate)
        await self.open()
        backoff = Backoff()
        while not stop.is_set():
            names = registered_workflows()
            if not names:
                raise ConfigurationError(
                    "this worker has no registered workflows; import the module that defines them"
                )
            try:
                pause = await self._serve_once(names, concurrency)
            except Exception as exc:
                fault = self.store.classify(exc)
                if fault == "transient":
                    self.outage.down(exc)
                elif isinstance(exc, CorruptHistoryError):
                    log.error("skipping an unreadable run row: %s", exc)
                else:
                    raise  # a permanent refusal: misconfiguration, for the operator
                pause = backoff.delay()
            else:
                self.outage.up()
                backoff.reset()
            if pause is None:
                continue
            stopper = asyncio.ensure_future(stop.wait())
            waiter = asyncio.ensure_future(self._wait_change(pause))
            await asyncio.wait({stopper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            waiter.cancel()

    async def _serve_once(self, names: list[str], concurrency: int) -> float | None:
        """Take what is due; how long to pause before looking again (None: at once)."""
        await self._recover_dead(names)
        room = concurrency - len(self._drives)
        if room > 0:
            leases = await self.store.claim_due(
                self.owner, self.lease_seconds, now=time.time(), workflows=names, limit=room
            )
            for lease in leases:
                try:
                    info = await self.store.get_run(lease.run_id)
                except Exception:
                    with contextlib.suppress(Exception):
                        await self.store.release(lease)
                    raise
                self._drive(lease, get_workflow(info.workflow))
            if len(leases) == room:
                return None
        pause = self.poll_interval
        wake = await self.store.next_wake(names)
        if wake is not None:
            pause = min(pause, wake - time.time())
        return pause

    async def _recover_dead(self, names: Sequence[str]) -> None:
        """Break the leases of runs whose owner process on this host has died."""
        for info in await self._held_runs():
            if (
                info.workflow in names
                and info.owner
                and info.owner != self.owner
                and owner_is_dead(info.owner)
            ):
                with contextlib.suppress(RunNotFoundError):
                    if await self._try_take(info) is not None:
                        metrics.observe_recovery(info.workflow)

    async def _held_runs(self) -> list[RunInfo]:
        """Runs that may hold a lease now (running or pending): where dead owners hide."""
        return await self.store.list_runs(
            statuses=(RunStatus.RUNNING, RunStatus.PENDING), limit=10_000
        )

    async def idle(self) -> None:
        """Return once this process drives no run (each drive ran to its next stop)."""
        while self._drives:
            await asyncio.gather(*self._drives.values(), return_exceptions=True)
