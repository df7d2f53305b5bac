"""Typed errors. Every message names what went wrong and where.

Substrate errors are classified where they arise, at the boundary of a ``Store`` or a
``Backend``, into one of two kinds:

* **transient** — ``BackendUnavailableError``: the database or server is away or busy
  for now (connection lost or refused, server restarting or shutting down, lock or
  statement timeouts, serialization failures, SQLite busy/locked/read-only/I-O errors).
  A drive that meets one stops at once *without writing anything*; the workflow's code
  never sees it (it unwinds like a cancellation, past ``except Exception``) and it is
  never recorded as the run's failure. The run is retried with capped, jittered backoff
  by this process or, once its lease expires, by any worker.
* **permanent** — ``SubstrateError``: the substrate answered and retrying will not help
  (schema missing or wrong, permission denied, a corrupt or wrongly shaped row,
  ``CorruptHistoryError``). The run *parks* (``needs-attention``) with a reason naming
  what and where, so an operator can fix it and ``perdure resume`` it.

Only exceptions raised by user code fail a run.

A backend author plugs in its substrate's own errors in one of three ways, most
direct first: raise the typed errors above from the store/backend methods; override
``Store.classify(exc)``; or ``register_classifier(fn)`` with a function that returns
``"transient"``, ``"permanent"`` or ``None`` (not mine) for an exception. ``classify``
consults them, following ``__cause__`` chains, so a wrapped driver error is found too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from perdure._masking import mask_text

#: What ``classify`` says about a substrate error.
Fault = Literal["transient", "permanent"]
Classifier = Callable[[BaseException], "Fault | None"]


class PerdureError(Exception):
    """Base class of every error perdure raises.

    Its message passes through ``mask_text``: a URL or ``password=`` quoted in any typed
    error never shows the password.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(mask_text(a) if isinstance(a, str) else a for a in args))


class ConfigurationError(PerdureError):
    """The backend URL or another setting is malformed or names nothing we know."""


class RetentionError(ConfigurationError):
    """A retention setting (``retention=`` in a backend URL, ``[tool.perdure]
    retention``) is not a duration; the message names the setting, the value and where."""


class BackendUnavailableError(PerdureError):
    """Transient: the substrate (database, server) cannot be reached or used right now.

    Retrying later may succeed; the operation that raised it wrote nothing.
    """


class SubstrateError(PerdureError):
    """Permanent: the substrate refused in a way retrying will not fix (schema wrong,
    permission denied, a corrupt row). The message names the substrate and the object."""


class RunNotFoundError(PerdureError, LookupError):
    """No run with this id exists on the configured backend."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class WorkflowNotFoundError(PerdureError, LookupError):
    """A run names a workflow this process has not registered (import its module)."""


class SerializationError(PerdureError, TypeError):
    """A value cannot be stored, or a stored value cannot be decoded."""


class CorruptHistoryError(SubstrateError):
    """A stored history row cannot be read back; the row is left untouched."""

    def __init__(
        self, run_id: str, seq: int | None, detail: str, *, step_key: str | None = None
    ) -> None:
        where = f"run {run_id!r}" + (f" event #{seq}" if seq is not None else "")
        super().__init__(f"corrupt history in {where}: {detail}")
        self.run_id = run_id
        self.seq = seq
        self.step_key = step_key


class DeterminismError(PerdureError):
    """Replay met a step that differs from the recorded history: the code changed."""

    def __init__(self, run_id: str, step_key: str, detail: str) -> None:
        super().__init__(f"run {run_id!r}, step {step_key!r}: {detail}")
        self.run_id = run_id
        self.step_key = step_key


class LeaseLostError(PerdureError):
    """This process no longer owns the run; its writes are rejected (fencing)."""


class InvalidRunStateError(PerdureError):
    """The operation does not apply to the run in its current status."""


class ApprovalNotPendingError(InvalidRunStateError):
    """An approval or rejection names a request the run is not waiting on now: never
    asked, already answered (another approver won), timed out, or the run moved on.
    ``request_id`` is the request named (``None``: the caller named none and no
    approval is pending)."""

    def __init__(self, run_id: str, request_id: str | None, detail: str) -> None:
        named = "" if request_id is None else f" request {request_id!r}"
        super().__init__(f"run {run_id!r}: no approval{named} is pending: {detail}")
        self.run_id = run_id
        self.request_id = request_id


class StepFailedError(PerdureError):
    """A step failed permanently: its retries are exhausted or the error is permanent.

    Raised inside the workflow at the step's call site, identically on replay.
    """

    def __init__(self, step_key: str, attempts: int, error_type: str, message: str) -> None:
        super().__init__(
            f"step {step_key!r} failed after {attempts} attempt(s): {error_type}: {message}"
        )
        self.step_key = step_key
        self.attempts = attempts
        self.error_type = error_type
        self.error_message = message


class PermanentError(PerdureError):
    """Raise from a step to fail it at once, without retrying."""


class OutcomeUnknownError(PerdureError):
    """Raise from an effect when its receiver may or may not have acted (a timeout).

    A non-idempotent effect that raises this parks the run as ``needs-attention``
    instead of retrying; an idempotent one is retried with the same key.
    """


class OutcomeUnresolvedError(OutcomeUnknownError):
    """The receiver says an earlier call with this effect's idempotency key has an
    unknown outcome and will not apply it again until an operator resolves it (perdure's
    gateway answers so: ``409 outcome_unknown``). Retrying cannot help: the run parks as
    ``needs-attention`` at the effect, idempotent receiver or not, for ``reconcile``.

    Raised by the effect, or recognized from an HTTP client's error carrying the
    gateway's answer (``perdure._semantics.unresolved``).
    """


class SignalTimeoutError(PerdureError, TimeoutError):
    """``wait_for_signal`` reached its timeout with no signal delivered."""

    def __init__(self, name: str, timeout: float) -> None:
        super().__init__(f"no signal {name!r} within {timeout:g}s")
        self.signal_name = name


class RunFailedError(PerdureError):
    """The run ended in ``failed``; ``error`` holds the recorded error."""

    def __init__(self, run_id: str, error: dict[str, Any]) -> None:
        super().__init__(
            f"run {run_id!r} failed: {error.get('type', 'Error')}: {error.get('message', '')}"
        )
        self.run_id = run_id
        self.error = error


class RunCancelledError(PerdureError):
    """The run was cancelled."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} was cancelled")
        self.run_id = run_id


class NeedsAttentionError(PerdureError):
    """The run is parked until someone acts: an effect's outcome is unknown and must be
    reconciled (``reason`` ``unknown-outcome``), or its history or substrate needs a fix
    (then ``perdure resume``)."""

    def __init__(
        self,
        run_id: str,
        step_key: str | None,
        *,
        reason: str = "unknown-outcome",
        detail: str | None = None,
    ) -> None:
        if reason == "unknown-outcome" and step_key is not None:
            text = (
                f"run {run_id!r} needs attention: the outcome of step {step_key!r} is "
                f"unknown; check the receiver, then `perdure reconcile {run_id} "
                f"--step {step_key!r} ...`"
            )
        else:
            where = f" at step {step_key!r}" if step_key is not None else ""
            text = (
                f"run {run_id!r} needs attention ({reason}){where}: {detail or 'see its history'}"
                f"; fix the cause, then `perdure resume {run_id}`"
            )
        super().__init__(text)
        self.run_id = run_id
        self.step_key = step_key
        self.reason = reason


class InvalidInputError(PerdureError, ValueError):
    """A run id, step name or signal name cannot be used: empty, too long, holding NUL
    or not valid Unicode. ``field`` names which argument."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid {field} {shown}: {reason}")
        self.field = field


_classifiers: list[Classifier] = []


def register_classifier(classifier: Classifier) -> None:
    """Teach ``classify`` a substrate's own exceptions (idempotent per function)."""
    if classifier not in _classifiers:
        _classifiers.append(classifier)


def classify(exc: BaseException) -> Fault | None:
    """``"transient"``, ``"permanent"``, or ``None`` when ``exc`` is not a substrate
    error anyone registered; looks through ``__cause__`` chains."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BackendUnavailableError):
            return "transient"
        if isinstance(current, SubstrateError):
            return "permanent"
        for classifier in _classifiers:
            fault = classifier(current)
            if fault is not None:
                return fault
        current = current.__cause__
    return None
