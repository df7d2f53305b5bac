"""An in-memory store, for unit tests of the core only: it survives nothing."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from perdure._errors import LeaseLostError, RunNotFoundError
from perdure._records import Event, EventKind, NewEvent, RunInfo, RunStatus, SignalRecord
from perdure._semantics import approvals, guards
from perdure._store import CLAIMABLE, Lease, NewRun, RunUpdate, Store


class MemoryStore(Store):
    """Keeps everything in dicts of this process."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._runs: dict[str, RunInfo] = {}
        self._events: dict[str, list[Event]] = {}
        self._signals: list[tuple[SignalRecord, bool]] = []
        self._ids = itertools.count(1)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def load(self, info: RunInfo, events: Sequence[Event]) -> None:
        """Put a copy of a run and its history here, free for any owner to take."""
        run = copy.deepcopy(info)
        run.owner = None
        run.lease_until = None
        self._runs[run.run_id] = run
        self._events[run.run_id] = [copy.deepcopy(e) for e in events]

    def _run(self, run_id: str) -> RunInfo:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFoundError(run_id) from None

    def _add(self, run_id: str, seq: int, ev: NewEvent, now: float) -> None:
        self._events[run_id].append(
            Event(run_id, seq, ev.kind, now, ev.step_key, ev.name, copy.deepcopy(ev.data))
        )

    async def create_run(
        self, new: NewRun, owner: str, lease_seconds: float
    ) -> tuple[RunInfo, Lease | None]:
        import time

        now = time.time()
        if new.run_id in self._runs:
            return approvals.present(copy.copy(self._runs[new.run_id])), None
        info = RunInfo(
            run_id=new.run_id,
            workflow=new.workflow,
            status=RunStatus.RUNNING,
            input=copy.deepcopy(new.input),
            created_at=now,
            updated_at=now,
            code_version=new.code_version,
            owner=owner,
            lease_until=now + lease_seconds,
            fence=1,
            parent_run_id=new.parent_run_id,
            details=dict(new.details),
        )
        self._runs[new.run_id] = info
        self._events[new.run_id] = []
        self._add(new.run_id, 0, NewEvent(EventKind.RUN_STARTED, data=new.input), now)
        return copy.copy(info), Lease(new.run_id, owner, 1, 1)

    async def get_run(self, run_id: str) -> RunInfo:
        return approvals.present(copy.copy(self._run(run_id)))

    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        updated_before: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        runs = [
            approvals.present(copy.copy(r))
            for r in self._runs.values()
            if (statuses is None or r.status in statuses)
            and (updated_before is None or r.updated_at < updated_before)
            and (workflow is None or r.workflow == workflow)
        ]
        runs.sort(key=lambda r: r.created_at, reverse=True)
        return runs[:limit]

    async def load_history(self, run_id: str) -> list[Event]:
        self._run(run_id)
        return list(self._events[run_id])

    async def append(
        self,
        lease: Lease,
        events: Sequence[NewEvent],
        *,
        lease_seconds: float,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        import time

        now = time.time()
        run = self._run(lease.run_id)
        if run.fence != lease.fence or run.owner != lease.owner:
            raise LeaseLostError(f"run {lease.run_id!r}: lease of {lease.owner} was taken over")
        for ev in events:
            self._add(lease.run_id, lease.next_seq, ev, now)
            lease.next_seq += 1
        if consume_signal is not None:
            self._signals = [
                (s, used or s.signal_id == consume_signal) for s, used in self._signals
            ]
        run.updated_at = now
        lease.cancel_requested = run.cancel_requested
        if update is None:
            run.lease_until = now + lease_seconds
            return
        run.status = update.status
        run.result = copy.deepcopy(update.result)
        run.error = update.error
        run.waiting_for = update.waiting_for
        run.wake_at = update.wake_at
        run.attention = update.attention
        run.owner = None
        run.lease_until = None
        if (
            update.status is RunStatus.SUSPENDED
            and update.waiting_for is not None
            and any(
                s.run_id == run.run_id and s.name == update.waiting_for and not used
                for s, used in self._signals
            )
        ):
            run.wake_at = now

    def _due(self, run: RunInfo, now: float, break_owner: str | None) -> bool:
        if run.status not in CLAIMABLE:
            return False
        if run.status is RunStatus.SUSPENDED and (run.wake_at is None or run.wake_at > now):
            return False
        free = run.owner is None or (run.lease_until or 0) < now
        return free or (break_owner is not None and run.owner == break_owner)

    def _take(self, run: RunInfo, owner: str, lease_seconds: float, now: float) -> Lease:
        run.fence += 1
        run.owner = owner
        run.lease_until = now + lease_seconds
        run.status = RunStatus.RUNNING
        run.wake_at = None
        run.waiting_for = None
        return Lease(
            run.run_id, owner, run.fence, len(self._events[run.run_id]), run.cancel_requested
        )

    async def acquire(
        self,
        run_id: str,
        owner: str,
        lease_seconds: float,
        *,
        now: float,
        break_owner: str | None = None,
    ) -> Lease | None:
        run = self._run(run_id)
        if not self._due(run, now, break_owner):
            return None
        return self._take(run, owner, lease_seconds, now)

    async def claim_due(
        self, owner: str, lease_seconds: float, *, now: float, workflows: Sequence[str], limit: int
    ) -> list[Lease]:
        out: list[Lease] = []
        for run in sorted(self._runs.values(), key=lambda r: r.updated_at):
            if len(out) >= limit:
                break
            if run.workflow in workflows and self._due(run, now, None):
                out.append(self._take(run, owner, lease_seconds, now))
        return out

    async def next_wake(self, workflows: Sequence[str]) -> float | None:
        wakes = [
            r.wake_at
            for r in self._runs.values()
            if r.status is RunStatus.SUSPENDED and r.wake_at is not None and r.workflow in workflows
        ]
        return min(wakes) if wakes else None

    async def renew(self, owner: str, lease_seconds: float, *, now: float) -> None:
        for run in self._runs.values():
            if run.owner == owner:
                run.lease_until = now + lease_seconds

    async def release(self, lease: Lease) -> None:
        run = self._run(lease.run_id)
        if run.fence == lease.fence and run.owner == lease.owner:
            run.owner = None
            run.lease_until = None

    async def deliver_signal(
        self,
        run_id: str,
        name: str,
        payload: Any,
        sent_by: str | None,
        *,
        now: float,
        authorization: dict[str, Any] | None = None,
    ) -> SignalRecord:
        run = self._run(run_id)
        answer = approvals.is_approval(name)
        if answer:
            name = approvals.answer_channel(run_id, run.status, run.waiting_for, name)
        else:
            guards.check_can_signal(run_id, run.status)
        rec = SignalRecord(
            next(self._ids),
            run_id,
            name,
            copy.deepcopy(payload),
            sent_by,
            now,
            copy.deepcopy(authorization),
        )
        self._signals.append((rec, False))
        if answer:
            run.waiting_for = None  # answered: a second answer finds nothing pending
            run.attention = None
            run.wake_at = now
        elif run.status is RunStatus.SUSPENDED and run.waiting_for == name:
            run.wake_at = now
        return rec

    async def next_signal(self, run_id: str, name: str) -> SignalRecord | None:
        for s, used in self._signals:
            if s.run_id == run_id and s.name == name and not used:
                return s
        return None

    async def request_cancel(self, run_id: str, *, now: float) -> RunInfo:
        run = self._run(run_id)
        guards.check_can_cancel(run_id, run.status)
        run.cancel_requested = True
        if run.status in (RunStatus.SUSPENDED, RunStatus.NEEDS_ATTENTION):
            run.status = RunStatus.SUSPENDED
            run.wake_at = now
        return approvals.present(copy.copy(run))

    async def admin_append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expect: Sequence[RunStatus],
        status: RunStatus,
        now: float,
    ) -> RunInfo:
        run = self._run(run_id)
        guards.check_expected(run_id, run.status, expect)
        seq = len(self._events[run_id])
        for i, ev in enumerate(events):
            self._add(run_id, seq + i, ev, now)
        run.status = status
        run.attention = None
        run.wake_at = now
        run.updated_at = now
        return approvals.present(copy.copy(run))

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        gone = [r for r in run_ids if r in self._runs and self._runs[r].status.terminal]
        for run_id in gone:
            del self._runs[run_id]
            self._events.pop(run_id, None)
        self._signals = [(s, used) for s, used in self._signals if s.run_id not in gone]
        return gone
