"""The history events of a run and their shapes, written in one place.

Every backend records (or, reading its substrate's own records, rebuilds) exactly these
events, so ``perdure runs show``, exports and the conformance suite see one history
whatever the substrate. ``data`` is always JSON data. Step keys are
``<position>:<name>`` (see ``perdure._positions``); run-level events have none.

==================  ==========  ====================================================
kind                step_key    data
==================  ==========  ====================================================
run_started         None        ``{"args": [...], "kwargs": {...}}`` (seq 0)
intent              step        ``{"attempt"}``
attempt_failed      step        ``{"attempt", "error", "retry_in"}``
step_completed      step        ``{"result", "attempt", "kind", "duration"}``
step_failed         step        ``{"attempts", "error", "kind"}``
signal_received     signal      ``{"payload", "sent_by", "sent_at", "signal_id",
                                "waited"[, "request_id"][, "decision"]}`` or
                                ``{"timed_out": True, "timeout"}``; ``request_id``
                                for an approval (``semantics.approvals``),
                                ``decision`` the authorizer's decision on the
                                sender (``perdure._authorization``; not named
                                ``authorization``, a key redaction removes)
timer_started       sleep       ``{"seconds", "wake_at"}``
marker              patch       the marker's name in ``name``; no data
suspended           wait        ``{"waiting_for", "wake_at", ...detail}``; an approval
                                wait's detail holds ``request_id``
needs_attention     step|None   the attention record (``perdure._semantics.attention``)
reconciled          step|None   ``{"outcome", "by", "message"[, "result"|"error"]
                                [, "decision"]}``;
                                ``{"outcome": "resume"}`` for ``resume``
run_succeeded       None        ``{"result"}``
run_failed          None        the error: ``{"type", "message"[, "step", "attempts",
                                "cause"]}``
run_cancelled       None        ``{"compensated": [step keys, newest first]}``
==================  ==========  ====================================================

An ``error`` is ``{"type": <exception class name>, "message": str(exc)}``.
"""

from __future__ import annotations

from typing import Any, cast

from perdure import _redaction as redaction
from perdure._errors import SerializationError, StepFailedError
from perdure._records import EventKind, NewEvent, SignalRecord
from perdure._serialization import from_jsonable, to_jsonable

__all__ = [
    "attempt_failed",
    "decode_input",
    "encode_input",
    "error_info",
    "intent",
    "marker",
    "needs_attention",
    "reconciled",
    "resumed",
    "run_cancelled",
    "run_failed",
    "run_failed_error",
    "run_started",
    "run_succeeded",
    "signal_received",
    "signal_timed_out",
    "step_completed",
    "step_failed",
    "suspended",
    "timer_started",
]


def error_info(exc: BaseException) -> dict[str, Any]:
    """How an exception is recorded: its class name and its message with the secrets in
    it redacted (``perdure._redaction``), never its traceback."""
    return {"type": type(exc).__name__, "message": redaction.redact_text(str(exc))}


def run_failed_error(exc: BaseException) -> dict[str, Any]:
    """The ``error`` of a run its workflow failed with ``exc`` (a failed step named)."""
    error = error_info(exc)
    if isinstance(exc, StepFailedError):
        error.update(
            step=exc.step_key,
            attempts=exc.attempts,
            cause={"type": exc.error_type, "message": exc.error_message},
        )
    return error


# -- input ---------------------------------------------------------------------------------


def encode_input(run_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A run's input as stored: ``{"args": [...], "kwargs": {...}}``."""
    return to_jsonable({"args": list(args), "kwargs": kwargs}, f"input of run {run_id!r}")


def decode_input(run_id: str, stored: Any) -> tuple[list[Any], dict[str, Any]]:
    """The workflow's arguments from a stored input; ``SerializationError`` names the run."""
    data: Any = from_jsonable(stored, f"input of run {run_id!r}")
    if not isinstance(data, dict) or "args" not in data:
        raise SerializationError(f"input of run {run_id!r} is not an args/kwargs record")
    record = cast(dict[str, Any], data)
    return list(record["args"]), dict(record.get("kwargs") or {})


def run_started(encoded_input: Any) -> NewEvent:
    """Seq 0 of every history: the run's input as ``encode_input`` made it."""
    return NewEvent(EventKind.RUN_STARTED, data=encoded_input)


# -- steps -----------------------------------------------------------------------------------


def intent(key: str, name: str, attempt: int) -> NewEvent:
    return NewEvent(EventKind.INTENT, key, name, {"attempt": attempt})


def attempt_failed(
    key: str, name: str, attempt: int, exc: BaseException, retry_in: float
) -> NewEvent:
    return NewEvent(
        EventKind.ATTEMPT_FAILED,
        key,
        name,
        {"attempt": attempt, "error": error_info(exc), "retry_in": retry_in},
    )


def step_completed(
    key: str, name: str, kind: str, encoded_result: Any, attempt: int, duration: float
) -> NewEvent:
    return NewEvent(
        EventKind.STEP_COMPLETED,
        key,
        name,
        {
            "result": encoded_result,
            "attempt": attempt,
            "kind": kind,
            "duration": round(duration, 6),
        },
    )


def step_failed(key: str, name: str, kind: str, attempts: int, error: dict[str, Any]) -> NewEvent:
    return NewEvent(
        EventKind.STEP_FAILED, key, name, {"attempts": attempts, "error": error, "kind": kind}
    )


# -- waits -----------------------------------------------------------------------------------


def signal_received(
    key: str, name: str, signal: SignalRecord, waited: float, *, request_id: str | None = None
) -> NewEvent:
    data: dict[str, Any] = {
        "payload": signal.payload,
        "sent_by": signal.sent_by,
        "sent_at": signal.sent_at,
        "signal_id": signal.signal_id,
        "waited": round(waited, 6),
    }
    if request_id is not None:
        data["request_id"] = request_id
    if signal.authorization is not None:
        data["decision"] = signal.authorization
    return NewEvent(EventKind.SIGNAL_RECEIVED, key, name, data)


def signal_timed_out(key: str, name: str, timeout: float) -> NewEvent:
    return NewEvent(EventKind.SIGNAL_RECEIVED, key, name, {"timed_out": True, "timeout": timeout})


def timer_started(key: str, seconds: float, wake_at: float) -> NewEvent:
    return NewEvent(EventKind.TIMER_STARTED, key, "sleep", {"seconds": seconds, "wake_at": wake_at})


def marker(key: str, name: str) -> NewEvent:
    return NewEvent(EventKind.MARKER, key, name)


def suspended(
    key: str, waiting_for: str | None, wake_at: float | None, detail: dict[str, Any] | None = None
) -> NewEvent:
    return NewEvent(
        EventKind.SUSPENDED,
        key,
        waiting_for,
        {"waiting_for": waiting_for, "wake_at": wake_at, **(detail or {})},
    )


# -- parking and operators --------------------------------------------------------------------


def needs_attention(
    attention: dict[str, Any], key: str | None = None, name: str | None = None
) -> NewEvent:
    return NewEvent(EventKind.NEEDS_ATTENTION, key, name, attention)


def reconciled(
    step_key: str,
    outcome: str,
    *,
    result: Any = None,
    message: str | None = None,
    by: str | None = None,
    authorization: dict[str, Any] | None = None,
) -> NewEvent:
    """An operator's verdict on a parked effect; ``succeeded``/``failed`` stand in the
    step's position on replay, ``retry`` calls it again with the same key."""
    data: dict[str, Any] = {"outcome": outcome, "by": by, "message": message}
    if authorization is not None:
        data["decision"] = authorization
    if outcome == "succeeded":
        data["result"] = to_jsonable(result, f"reconciled result of step {step_key!r}")
    elif outcome == "failed":
        data["error"] = {"type": "Reconciled", "message": message or "marked failed"}
    return NewEvent(EventKind.RECONCILED, step_key, step_key.partition(":")[2], data)


def resumed(*, by: str | None = None, authorization: dict[str, Any] | None = None) -> NewEvent:
    """An operator made a suspended or parked run due again (``perdure resume``), with
    the identity and the ``Authorizer``'s decision when it went through one."""
    data: dict[str, Any] = {"outcome": "resume"}
    if by is not None:
        data["by"] = by
    if authorization is not None:
        data["decision"] = authorization
    return NewEvent(EventKind.RECONCILED, data=data)


#: The inbox name under which ``Backend.cancel`` (``perdure._operator``) delivers who
#: cancelled and the ``Authorizer``'s decision; the drive records it when it starts
#: cancelling (the cancel itself is a flag every backend keeps apart from the history).
#: No caller may send it: ``signal`` refuses names starting ``perdure:``.
CANCEL_RECORD = "perdure:cancel"


def cancel_requested(signal: SignalRecord) -> NewEvent:
    """Who asked for the cancellation the drive is carrying out, and the decision."""
    data: dict[str, Any] = {"by": signal.sent_by, "sent_at": signal.sent_at}
    if signal.authorization is not None:
        data["decision"] = signal.authorization
    return NewEvent(EventKind.CANCEL_REQUESTED, data=data)


# -- end of run --------------------------------------------------------------------------------


def run_succeeded(encoded_result: Any) -> NewEvent:
    return NewEvent(EventKind.RUN_SUCCEEDED, data={"result": encoded_result})


def run_failed(error: dict[str, Any]) -> NewEvent:
    return NewEvent(EventKind.RUN_FAILED, data=error)


def run_cancelled(compensated: list[str]) -> NewEvent:
    return NewEvent(EventKind.RUN_CANCELLED, data={"compensated": compensated})
