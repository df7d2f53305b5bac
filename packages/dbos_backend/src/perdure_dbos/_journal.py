"""``DbosJournal``: perdure's ``Journal`` on DBOS steps, and a run's history read back.

Each append is one DBOS step of the run's workflow, named by the perdure step it
records, whose output (DBOS's portable JSON) is the list of perdure events; DBOS's own
``owner_xid`` fences it, so an execution that lost the workflow to another executor
cannot record. Replay is perdure's, not DBOS's: the history is read from the run's step
rows by SQL with perdure's decoder (``_records``), and DBOS's operation counter is moved
past them, so DBOS never replays (or decodes) a recorded step itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbos import DBOS
from dbos import error as dbos_errors

from perdure.spi import (
    CorruptHistoryError,
    Event,
    EventKind,
    LeaseLostError,
    NewEvent,
    RunUpdate,
    SignalRecord,
    approvals,
)
from perdure_dbos import _compat
from perdure_dbos._records import (
    WORKFLOW_NAME,
    StepRow,
    decode,
    seconds,
    status_and_marks,
    step_rows,
)
from perdure_dbos._tables import ADMIN, Marks

#: Seconds between two reads of the cancel flag while steps record back to back.
CANCEL_CHECK = 0.25


def pack(event: NewEvent, at: float) -> dict[str, Any]:
    return {
        "kind": event.kind.value,
        "key": event.step_key,
        "name": event.name,
        "data": event.data,
        "at": at,
    }


def unpack_new(record: Any) -> NewEvent:
    return NewEvent(
        EventKind(record["kind"]), record.get("key"), record.get("name"), record.get("data")
    )


def step_name(events: Sequence[NewEvent]) -> str:
    """The DBOS step name of an append: the perdure step key of a completion, else the
    event kind with the key (an intent is not a second step of the step's own name)."""
    last = events[-1]
    if last.kind is EventKind.STEP_COMPLETED and last.step_key:
        return last.step_key
    return f"{last.kind.value}:{last.step_key}" if last.step_key else last.kind.value


def _approval_timed_out(run_id: str, events: Sequence[NewEvent]) -> str | None:
    """The channel of the approval request whose wait ``events`` time out, if any."""
    for event in events:
        data: Any = event.data
        if (
            event.kind is EventKind.SIGNAL_RECEIVED
            and event.name == approvals.APPROVAL
            and event.step_key
            and isinstance(data, dict)
            and data.get("timed_out")  # pyright: ignore[reportUnknownMemberType]
        ):
            return approvals.channel(approvals.request_id(run_id, event.step_key))
    return None


#: A run's history and the inbox ids it took, or why it cannot be replayed.
Replayed = tuple[list[Event], set[int]] | CorruptHistoryError


def read_history(run_id: str, stored_input: Any, created_at: float) -> tuple[Replayed, int]:
    """The run's events (seq 0 its input), the inbox ids its history took, and the
    highest DBOS operation id recorded. A row perdure cannot or will not decode raises
    ``CorruptHistoryError`` naming the run and the row, returned in the history's place
    (the operation id is known even then)."""
    rows = step_rows(_compat.system_engine(), _compat.system_tables(), run_id)
    return replayed(run_id, rows, stored_input, created_at)


def replayed(
    run_id: str, rows: Sequence[StepRow], stored_input: Any, created_at: float
) -> tuple[Replayed, int]:
    """``history_of`` ``rows`` (or its error), and the highest operation id among them."""
    last = max((row.function_id for row in rows), default=-1)
    try:
        return history_of(run_id, rows, stored_input, created_at), last
    except CorruptHistoryError as exc:
        return exc, last


@dataclass(frozen=True, slots=True)
class RunRead:
    """What an execution reads of its run at each load, on one connection."""

    found: Replayed
    #: The highest DBOS operation id recorded.
    last: int
    #: What the run recorded at its start (its trace context).
    details: dict[str, Any]
    cancel: bool
    #: The run's deliveries so far, read before the inbox (``Marks.suspend``).
    seen: int


def read_run(marks: Marks, run_id: str, stored_input: Any) -> RunRead:
    """The run's status, perdure's row of it and its step rows, read on one connection
    (the status first: its deliveries are counted before anything reads the inbox)."""
    engine, t = _compat.system_engine(), _compat.system_tables()
    with engine.connect() as conn:
        marked = status_and_marks(
            engine, t, WORKFLOW_NAME, marks.table, run_ids=[run_id], conn=conn
        )
        rows = step_rows(engine, t, run_id, conn)
    created, details, cancel, seen = time.time(), {}, False, 0
    if marked:
        st, row = marked[0]
        created = seconds(st.created_ms)
        mark = Marks.of(row)
        if mark is not None:
            details, cancel, seen = mark.details, mark.cancel_requested, mark.deliveries
    found, last = replayed(run_id, rows, stored_input, created)
    return RunRead(found, last, details, cancel, seen)


def history_of(
    run_id: str, rows: Sequence[StepRow], stored_input: Any, created_at: float
) -> tuple[list[Event], set[int]]:
    """The events ``rows`` record and the inbox ids they took (see ``read_history``)."""
    events = [Event(run_id, 0, EventKind.RUN_STARTED, created_at, data=stored_input)]
    taken: set[int] = set()
    for row in rows:
        out = decode(run_id, "operation_outputs", row.function_id, row.serialization, row.output)
        decode(run_id, "operation_outputs", row.function_id, row.serialization, row.error)
        if not isinstance(out, dict) or "events" not in out:
            continue  # DBOS's own operations (the stops stream's writes)
        record: dict[str, Any] = out  # pyright: ignore[reportUnknownVariableType]
        try:
            for item in record["events"]:
                new = unpack_new(item)
                events.append(
                    Event(
                        run_id,
                        len(events),
                        new.kind,
                        float(item["at"]),
                        new.step_key,
                        new.name,
                        new.data,
                    )
                )
            taken.update(int(i) for i in record.get("taken") or ())
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptHistoryError(
                run_id,
                row.function_id,
                f"operation_outputs row #{row.function_id} ({row.function_name}) is not a "
                f"perdure record: {type(exc).__name__}: {exc}",
            ) from None
    for event in events:
        if event.kind is EventKind.SIGNAL_RECEIVED and isinstance(event.data, dict):
            signal_id = event.data.get("signal_id")  # pyright: ignore[reportUnknownMemberType]
            if isinstance(signal_id, int):
                taken.add(signal_id)
    return events, taken


class DbosJournal:
    """The journal of one run's executions in this process (one per workflow execution)."""

    def __init__(self, marks: Marks, url: str, run_id: str, draining: Any) -> None:
        self.marks = marks
        self._url = url
        self._run_id = run_id
        self._draining = draining
        self.history: list[Event] = []
        #: Inbox ids (signals, operators' records) the history took.
        self.taken: set[int] = set()
        self._cancel = False
        self._checked = -CANCEL_CHECK
        #: The last update appended (the drive's stop).
        self.last_update: RunUpdate | None = None
        #: Whether this drive recorded past the run's last stop (it shows it running).
        self._moved_on = False
        #: The run's deliveries when this drive loaded (``Marks.suspend`` compares them).
        self.seen = 0
        #: What the run recorded at its start (read by ``load``).
        self.details: dict[str, Any] = {}

    # -- Journal -----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def url(self) -> str:
        return self._url

    @property
    def cancel_requested(self) -> bool:
        return self._cancel

    @property
    def draining(self) -> bool:
        return bool(self._draining())

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
        taken: Sequence[int] = (),
    ) -> None:
        at = time.time()
        record: dict[str, Any] = {"events": [pack(e, at) for e in events]}
        took = [*taken, *([consume_signal] if consume_signal is not None else [])]
        if took:
            record["taken"] = took
        if update is None and not self._moved_on:
            # The drive records past the run's last stop: from here it is running. (A
            # drive that replays to the same wait never shows the run running, so the
            # wait's answer is taken all along.)
            closing = _approval_timed_out(self.run_id, events)
            self._cancel = await asyncio.to_thread(
                self.marks.show_running, self.run_id, closing=closing
            )
            self._checked = time.monotonic()
            self._moved_on = True
        ran = False

        def step() -> dict[str, Any]:
            # Synchronous: DBOS runs its check of the step's row, this and the record of
            # its output in one trip to a thread (an async step takes one per statement).
            nonlocal ran
            ran = True
            now = time.monotonic()
            if update is None and now - self._checked >= CANCEL_CHECK:
                self._cancel = self.marks.cancel_requested(self.run_id)
                self._checked = now
            return record

        try:
            await DBOS.run_step_async({"name": step_name(events)}, step)
        except dbos_errors.DBOSWorkflowConflictIDError as exc:
            raise LeaseLostError(f"run {self.run_id!r}: another executor owns it ({exc})") from None
        except dbos_errors.DBOSUnexpectedStepError as exc:
            raise LeaseLostError(
                f"run {self.run_id!r}: another execution recorded this step ({exc})"
            ) from None
        if not ran:
            # DBOS answered from a row another execution of the run recorded there.
            raise LeaseLostError(f"run {self.run_id!r}: another execution recorded this step")
        for event in events:
            self.history.append(
                Event(
                    self.run_id,
                    len(self.history),
                    event.kind,
                    at,
                    event.step_key,
                    event.name,
                    event.data,
                )
            )
        self.taken.update(took)
        self.last_update = update
        if update is not None:
            # Only once the record is durable: whoever reads the run's new status (a
            # result, a wait to answer) finds the history that led there.
            self._cancel = await asyncio.to_thread(
                self.marks.apply, self.run_id, update, self.taken
            )
            self._checked = time.monotonic()

    async def next_signal(self, name: str) -> SignalRecord | None:
        found = await asyncio.to_thread(self.marks.waiting, self.run_id, name, self.taken)
        return found[0] if found else None

    # -- the run's side ------------------------------------------------------------------

    async def load(self, stored_input: Any) -> None:
        """Read the run back (``read_run``: one connection) and move DBOS's operation
        counter past its history."""
        read = await asyncio.to_thread(read_run, self.marks, self.run_id, stored_input)
        _compat.skip_operations_to(read.last)  # before anything, even a park, records
        self.details = read.details
        self._cancel, self.seen = read.cancel, read.seen
        self._checked = time.monotonic()
        self._moved_on = False
        if isinstance(read.found, CorruptHistoryError):
            raise read.found
        self.history, self.taken = read.found

    async def take_admin(self) -> bool:
        """Append the operators' records (``resume``, ``reconcile``) waiting in the inbox;
        whether there were any."""
        rows = await asyncio.to_thread(self.marks.waiting, self.run_id, ADMIN, self.taken)
        if not rows:
            return False
        events = [unpack_new(item) for row in rows for item in row.payload]
        await self.append(events, taken=[row.signal_id for row in rows])
        return True

    def ended(self) -> Event | None:
        """The run's end event, if the history has one."""
        for event in reversed(self.history):
            if event.kind in (
                EventKind.RUN_SUCCEEDED,
                EventKind.RUN_FAILED,
                EventKind.RUN_CANCELLED,
            ):
                return event
        return None
