"""Typed errors. Every message names what went wrong and where."""

from __future__ import annotations

from typing import Any

from perdure.masking import mask_text


class PerdureError(Exception):
    """Base class of every error perdure raises.

    Its message passes through ``mask_text``: a URL or ``password=`` quoted in any typed
    error never shows the password.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(mask_text(a) if isinstance(a, str) else a for a in args))


class ConfigurationError(PerdureError):
    """The backend URL or another setting is malformed or names nothing we know."""


class BackendUnavailableError(PerdureError):
    """The substrate (database, server) could not be reached."""


class RunNotFoundError(PerdureError, LookupError):
    """No run with this id exists on the configured backend."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class WorkflowNotFoundError(PerdureError, LookupError):
    """A run names a workflow this process has not registered (import its module)."""


class SerializationError(PerdureError, TypeError):
    """A value cannot be stored, or a stored value cannot be decoded."""


class CorruptHistoryError(PerdureError):
    """A stored history row cannot be read back; the row is left untouched."""

    def __init__(self, run_id: str, seq: int | None, detail: str) -> None:
        where = f"run {run_id!r}" + (f" event #{seq}" if seq is not None else "")
        super().__init__(f"corrupt history in {where}: {detail}")
        self.run_id = run_id
        self.seq = seq


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
    """The run is parked: an effect's outcome is unknown and must be reconciled."""

    def __init__(self, run_id: str, step_key: str) -> None:
        super().__init__(
            f"run {run_id!r} needs attention: the outcome of step {step_key!r} is unknown; "
            f"check the receiver, then `perdure reconcile {run_id} --step {step_key!r} ...`"
        )
        self.run_id = run_id
        self.step_key = step_key


class InvalidInputError(PerdureError, ValueError):
    """A run id, step name or signal name cannot be used: empty, too long, holding NUL
    or not valid Unicode. ``field`` names which argument."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid {field} {shown}: {reason}")
        self.field = field
