"""perdure's run semantics, written once for every backend.

What a step does on replay, intent before action, step retries, parking, compensation,
cancellation, the end of a run, the history events and their shapes, the reasons a run
is parked and the guards of ``signal``/``cancel``/``resume``/``reconcile`` all live here.
A backend supplies only two things:

(a) **Durability of a record** — a ``Journal`` per drive (``journal.py``)::

        class MyJournal:                      # one per drive of one run
            run_id: str
            url: str
            cancel_requested: bool            # refreshed by each append
            draining: bool                    # True: stop before the next step
            async def append(self, events, *, update=None, consume_signal=None): ...
            async def next_signal(self, name): ...   # oldest unconsumed SignalRecord

    ``append`` writes the events after every earlier one, atomically, fenced: a drive
    that lost the run raises ``LeaseLostError``. With ``update`` (a ``RunUpdate``) the
    drive ends: the run is suspended, parked or finished. Any error ``append`` raises
    stops the drive, writes nothing more, and comes out of ``drive`` unchanged (the
    workflow's code never sees it), so the backend classifies it (retry later, park).

(b) **Scheduling of a run** — when to call ``drive``::

        status = await drive(journal, workflow, stored_input, history)

    in a task with a fresh ``contextvars.Context()``, where ``stored_input`` is
    ``events.encode_input(run_id, args, kwargs)`` (recorded as seq 0,
    ``events.run_started(stored_input)``) and ``history`` is every event recorded so
    far, oldest first. Call it when the run starts; after a suspension when its
    ``update.wake_at`` has passed or a signal named ``update.waiting_for`` was
    delivered; after ``resume``/``reconcile`` (append ``events.resumed()`` /
    ``events.reconciled(...)`` once ``guards.check_can_resume`` /
    ``check_can_reconcile`` passed); and when cancellation is requested of a suspended
    or parked run (the drive then compensates and ends it ``cancelled``). A drive that
    raised (a crash, a lost lease, a substrate error) is simply driven again later: the
    replay returns every recorded step without executing it. If the history cannot be
    read at all, ``park_broken(journal, exc)`` parks the run with the reason.

``drive`` returns the ``RunStatus`` of its last append. Everything a user sees of a run
follows from the events appended, so a backend's ``history`` returns exactly them (with
``seq`` numbers from 0) and its ``RunInfo`` reflects the last ``RunUpdate``. Operator
guards (``guards``) raise ``InvalidRunStateError``: a signal or cancel to an ended run,
``resume`` of a run parked on an unknown outcome, ``reconcile`` of a step not parked.

Metrics and traces come with it: ``drive`` reports each drive's start, appends (timed)
and end to the observers registered in ``observe`` (OpenTelemetry spans always;
Prometheus counters once ``perdure._metrics.enable()`` ran), so a backend gets both by
driving through here; pass ``details=`` (the run record's ``RunInfo.details``) for the
drive's span to continue the trace the run was started in.

The embedded engine (``perdure._engine``) is this module on a ``Store`` with leases;
the DBOS and Temporal backends schedule runs with their substrate's own machinery.
"""

from __future__ import annotations

from perdure._semantics import approvals, events, guards, observe
from perdure._semantics.attention import Attention
from perdure._semantics.context import (
    RUN_CANCELLED,
    Cancelled,
    Drained,
    DriveContext,
    DriveStopped,
    Interrupt,
    ReplayEnd,
)
from perdure._semantics.drive import drive, park_broken
from perdure._semantics.journal import Journal

__all__ = [
    "RUN_CANCELLED",
    "Attention",
    "Cancelled",
    "Drained",
    "DriveContext",
    "DriveStopped",
    "Interrupt",
    "Journal",
    "ReplayEnd",
    "approvals",
    "drive",
    "events",
    "guards",
    "observe",
    "park_broken",
]
