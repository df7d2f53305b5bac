"""The contract for backend and adapter authors: everything they may import from core.

An application imports ``perdure``; a package that binds perdure to a framework (an
*adapter*) or to a substrate (a *backend*) imports this module, and only this module,
from core. The rest of core is private: its modules move and change without notice.

Adapters
--------
An adapter records a framework's work as steps of the current run. Before recording
anything it asks ``recording_run()``: None means "call plainly" (outside a run, or
inside a step whose own record covers this call). Otherwise it calls
``ctx.step(StepSpec(...), fn, args, kwargs)``, ``ctx.wait_for_signal``, ``ctx.keyed``
(for code a framework re-enters from the middle) and reports a mismatch it finds
itself with ``raise report_determinism(DeterminismError(...))``. Values it stores cross
``to_jsonable``/``from_jsonable``; tables of its own go in the SQL database
``state_url(ctx.url)`` names.

An adapter that rebuilds a finished run's live result in the caller's process (the
run ended in another process) calls ``check_replay(info, history)``: it drives the
run's workflow over a copy of its history in memory, so the adapter's own step
wrappers see every recorded result again while nothing executes and nothing is
written; it stops before the first step the history does not record and returns a
``ReplayReport`` (a determinism mismatch is reported, not raised).

Backends: a ``Store`` or a ``Backend``?
---------------------------------------
Implement a **Store** when the substrate is a database: something that keeps rows and
commits transactions, but schedules nothing (SQLite, PostgreSQL, another SQL or
key-value database). Write the ``Store`` contract — fenced appends, leases, an inbox,
``claim_due`` — and wrap it in the embedded engine, ``EmbeddedBackend(store)``, which
brings leases, recovery of dead workers, polling for due runs and the whole of the run
semantics. ``tests/core/test_store_contract.py`` checks a store; register a URL scheme
with ``register_backend`` or the ``perdure.backends`` entry point.

Implement a **Backend** when the substrate schedules work itself: it runs workflows,
retries them, wakes them on timers and messages and recovers them after a crash
(Temporal, DBOS). Leases and polling would duplicate — and fight — what it already
does. Such a backend maps a run to the substrate's own unit of work and, inside it,
calls the shared semantics: ``drive(journal, workflow, stored_input, history)`` with a
``Journal`` whose ``append`` makes records durable in the substrate's way, and drives
the run again when the substrate says it is due (see ``perdure.semantics`` for exactly
when). It implements the acting half of the operator verbs (``_signal``, ``_cancel``,
``_resume``, ``_reconcile``; ``Backend``'s public ``signal``/``approve``/``cancel``/...
ask the ``Authorizer`` first and pass its decision down), guards them with ``guards``
and builds their records with ``events``, so every backend keeps the same history and
raises the same errors. The
conformance suite (``perdure.testing``'s ``perdure_backend`` fixture, columns chosen by
``PERDURE_TEST_STORES``) proves it.
"""

from __future__ import annotations

from perdure.backend import Backend, ReconcileOutcome, RunHandle, outcome
from perdure.context import (
    RunContext,
    StepKind,
    StepSpec,
    current_run,
    current_step_key,
    recording_run,
    report_determinism,
)
from perdure.engine.backend import EmbeddedBackend
from perdure.engine.replay_check import ReplayReport, check_replay
from perdure.errors import (
    BackendUnavailableError,
    ConfigurationError,
    CorruptHistoryError,
    DeterminismError,
    InvalidRunStateError,
    LeaseLostError,
    RunNotFoundError,
    SerializationError,
    StepFailedError,
)
from perdure.positions import KEYED_PREFIX, Compensation, Positions
from perdure.records import (
    POSITIONAL_KINDS,
    Event,
    EventKind,
    NewEvent,
    RunInfo,
    RunStatus,
    SignalRecord,
)
from perdure.registry import BackendFactory, register_backend, state_url
from perdure.semantics import (
    Attention,
    Cancelled,
    DriveContext,
    DriveStopped,
    Interrupt,
    Journal,
    ReplayEnd,
    drive,
    events,
    guards,
    park_broken,
)
from perdure.serialization import from_jsonable, to_jsonable
from perdure.steps import call_plain
from perdure.store import CLAIMABLE, Lease, NewRun, RunUpdate, Store
from perdure.workflow import Workflow, get_workflow, registered_workflows

__all__ = [
    "CLAIMABLE",
    "KEYED_PREFIX",
    "POSITIONAL_KINDS",
    "Attention",
    "Backend",
    "BackendFactory",
    "BackendUnavailableError",
    "Cancelled",
    "Compensation",
    "ConfigurationError",
    "CorruptHistoryError",
    "DeterminismError",
    "DriveContext",
    "DriveStopped",
    "EmbeddedBackend",
    "Event",
    "EventKind",
    "Interrupt",
    "InvalidRunStateError",
    "Journal",
    "Lease",
    "LeaseLostError",
    "NewEvent",
    "NewRun",
    "Positions",
    "ReconcileOutcome",
    "ReplayEnd",
    "ReplayReport",
    "RunContext",
    "RunHandle",
    "RunInfo",
    "RunNotFoundError",
    "RunStatus",
    "RunUpdate",
    "SerializationError",
    "SignalRecord",
    "StepFailedError",
    "StepKind",
    "StepSpec",
    "Store",
    "Workflow",
    "call_plain",
    "check_replay",
    "current_run",
    "current_step_key",
    "drive",
    "events",
    "from_jsonable",
    "get_workflow",
    "guards",
    "outcome",
    "park_broken",
    "recording_run",
    "register_backend",
    "registered_workflows",
    "report_determinism",
    "state_url",
    "to_jsonable",
]
