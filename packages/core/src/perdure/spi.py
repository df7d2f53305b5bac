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
the run again when the substrate says it is due (see ``perdure._semantics`` for exactly
when). It implements the acting half of the operator verbs (``_signal``, ``_cancel``,
``_resume``, ``_reconcile``; ``Backend``'s public ``signal``/``approve``/``cancel``/...
ask the ``Authorizer`` first and pass its decision down), guards them with ``guards``
and builds their records with ``events``, so every backend keeps the same history and
raises the same errors. The
conformance suite (``perdure.testing``'s ``perdure_backend`` fixture, columns chosen by
``PERDURE_TEST_STORES``) proves it.

What else a package may use
---------------------------
Everything below is part of this contract; anything not exported here is not.

- **Errors.** The typed errors of ``perdure`` plus ``ApprovalNotPendingError``. A
  substrate's own exceptions are classified at its boundary: ``register_classifier(fn)``
  teaches ``classify(exc)`` to map them to a ``Fault`` (transient or permanent), and
  ``sqlite_error``/``postgres_error`` do it for those drivers' errors (a backend on the
  same database reuses them). Transient → ``BackendUnavailableError``; permanent →
  ``SubstrateError``.
- **Steps and retries.** ``RetryPolicy`` with ``DEFAULT_RETRY`` (a step's default) and
  ``NO_RETRY`` (an adapter's model call retried by the framework itself).
- **URLs and configuration.** ``resolve_url(url)`` is the URL a call means (argument,
  ``PERDURE_URL``, ``[tool.perdure]``, default); ``open_backend(url)`` the unopened backend
  it names; ``split_url`` parses one (schemes with ``+``), ``parse_sqlite_url`` and
  ``parse_postgres_url`` read those two, and ``mask_url`` is the only way a URL may enter
  a message or a log line.
- **Values.** ``to_jsonable``/``from_jsonable`` (above) encode a value for storage;
  ``dumps``/``loads`` are the JSON text of already-encoded data; ``from_stored_layer``
  decodes under a substrate's own serializer (sealed values passed up unopened).
  Encryption at rest: ``keyring()`` is the configured ``Keyring`` (None without a key),
  named by ``KEY_ENV``/``KEY_FILE_ENV``; a backend seals its substrate's payloads with it.
- **Owners and outages.** ``new_owner_id()`` names this process (host, pid, start time);
  ``owner_is_dead(owner)`` tells a dead local owner from a live or remote one, so a
  backend hands a dead worker's runs on. ``Backoff`` is the capped, jittered delay a
  worker waits between attempts while the substrate is away.
- **Backend helpers.** ``run_filter`` is ``list_runs``' arguments as a test of one run;
  ``outcome(info)`` a finished run's result; ``trace_context(run_id, workflow)`` what a
  new run records in its ``details`` so its drives' spans join the caller's trace;
  ``approvals`` the approval request ids and channels, ``Drained`` what ``drive`` returns
  when a drain stopped it (the run is left for another worker, not ended).
- **Locators.** ``find_locator(obj)`` is the importable ``module:qualname`` of an object a
  worker must find again (None if it has none); ``resolve_locator(ref, what=...)`` imports
  it, only from modules the user allowed.
- **Audit inspectors** (entry-point group ``perdure.audit``): an inspector reports a
  framework's tools with ``Audit.add(AuditEntry(...))``, reading a step's declaration with
  ``declaration_of``/``policy_of``, where it is defined with ``source_of`` and the steps its
  code calls with ``calls_of``.
- **Command groups** (entry-point group ``perdure.cli``): ``run_cli_command(body)`` runs a
  command's coroutine with perdure's error messages and exit codes.
- **Tests.** ``perdure.testing``: the pytest plugin, ``Receiver``/``Processes``/``Patience``,
  and ``perdure.testing.demo``, the services and bookkeeping an adapter's ``perdure demo``
  story uses.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from perdure._audit import Audit, calls_of, declaration_of, policy_of
from perdure._audit import Entry as AuditEntry
from perdure._audit import where as source_of
from perdure._backend import Backend, ReconcileOutcome, RunHandle, outcome, run_filter
from perdure._config import resolve_url
from perdure._context import (
    RunContext,
    StepKind,
    StepSpec,
    current_run,
    current_step_key,
    recording_run,
    report_determinism,
)
from perdure._encryption import KEY_ENV, KEY_FILE_ENV, Keyring, keyring
from perdure._engine.backend import EmbeddedBackend
from perdure._engine.outages import Backoff
from perdure._engine.owners import new_owner_id, owner_is_dead
from perdure._engine.replay_check import ReplayReport, check_replay
from perdure._errors import (
    ApprovalNotPendingError,
    BackendUnavailableError,
    ConfigurationError,
    CorruptHistoryError,
    DeterminismError,
    Fault,
    InvalidInputError,
    InvalidRunStateError,
    LeaseLostError,
    NeedsAttentionError,
    PerdureError,
    RunFailedError,
    RunNotFoundError,
    SerializationError,
    StepFailedError,
    SubstrateError,
    classify,
    register_classifier,
)
from perdure._locate import find as find_locator
from perdure._locate import resolve as resolve_locator
from perdure._masking import mask_url
from perdure._positions import KEYED_PREFIX, Compensation, Positions
from perdure._records import (
    POSITIONAL_KINDS,
    Event,
    EventKind,
    NewEvent,
    RunInfo,
    RunStatus,
    SignalRecord,
)
from perdure._registry import BackendFactory, open_backend, register_backend, state_url
from perdure._retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy
from perdure._semantics import (
    RUN_CANCELLED,
    Attention,
    Cancelled,
    Drained,
    DriveContext,
    DriveStopped,
    Interrupt,
    Journal,
    ReplayEnd,
    approvals,
    drive,
    events,
    guards,
    park_broken,
)
from perdure._serialization import dumps, from_jsonable, from_stored_layer, loads, to_jsonable
from perdure._steps import call_plain
from perdure._store import CLAIMABLE, Lease, NewRun, RunUpdate, Store
from perdure._stores.faults import postgres_error, sqlite_error
from perdure._stores.sqlite import parse_sqlite_url
from perdure._tracing import start_context as trace_context
from perdure._urls import split_url
from perdure._workflow import Workflow, get_workflow, registered_workflows


def parse_postgres_url(url: str) -> tuple[str, str, int]:
    """The libpq conninfo, schema and pool size a ``postgresql://`` URL names (perdure's
    ``?schema=`` and ``?pool_size=`` removed). Needs ``perdure[postgres]``."""
    from perdure._stores.postgres import parse_postgres_url as parse

    return parse(url)


def run_cli_command(
    body: Callable[[], Coroutine[Any, Any, int | None]],
    before: Callable[[], object] | None = None,
) -> None:
    """Run a command's ``body()`` in its own event loop, printing perdure's one-line error
    messages and exiting with its exit codes; ``before`` runs first, outside the loop."""
    from perdure._cli.common import execute

    execute(body, before)


__all__ = [
    "CLAIMABLE",
    "DEFAULT_RETRY",
    "KEYED_PREFIX",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "NO_RETRY",
    "POSITIONAL_KINDS",
    "RUN_CANCELLED",
    "ApprovalNotPendingError",
    "Attention",
    "Audit",
    "AuditEntry",
    "Backend",
    "BackendFactory",
    "BackendUnavailableError",
    "Backoff",
    "Cancelled",
    "Compensation",
    "ConfigurationError",
    "CorruptHistoryError",
    "DeterminismError",
    "Drained",
    "DriveContext",
    "DriveStopped",
    "EmbeddedBackend",
    "Event",
    "EventKind",
    "Fault",
    "Interrupt",
    "InvalidInputError",
    "InvalidRunStateError",
    "Journal",
    "Keyring",
    "Lease",
    "LeaseLostError",
    "NeedsAttentionError",
    "NewEvent",
    "NewRun",
    "PerdureError",
    "Positions",
    "ReconcileOutcome",
    "ReplayEnd",
    "ReplayReport",
    "RetryPolicy",
    "RunContext",
    "RunFailedError",
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
    "SubstrateError",
    "Workflow",
    "approvals",
    "call_plain",
    "calls_of",
    "check_replay",
    "classify",
    "current_run",
    "current_step_key",
    "declaration_of",
    "drive",
    "dumps",
    "events",
    "find_locator",
    "from_jsonable",
    "from_stored_layer",
    "get_workflow",
    "guards",
    "keyring",
    "loads",
    "mask_url",
    "new_owner_id",
    "open_backend",
    "outcome",
    "owner_is_dead",
    "park_broken",
    "parse_postgres_url",
    "parse_sqlite_url",
    "policy_of",
    "postgres_error",
    "recording_run",
    "register_backend",
    "register_classifier",
    "registered_workflows",
    "report_determinism",
    "resolve_locator",
    "resolve_url",
    "run_cli_command",
    "run_filter",
    "source_of",
    "split_url",
    "sqlite_error",
    "state_url",
    "to_jsonable",
    "trace_context",
]
