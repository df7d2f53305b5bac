"""Why a run is parked (``needs-attention``): the reasons and the records that say so."""

from __future__ import annotations

import enum
import time
from typing import Any

from perdure import _redaction as redaction
from perdure._errors import (
    CorruptHistoryError,
    DeterminismError,
    SerializationError,
    SubstrateError,
)
from perdure._serialization import to_jsonable

__all__ = ["Attention", "broken_attention", "compensation_failed", "unknown_outcome"]


class Attention(str, enum.Enum):
    """The ``reason`` of a parked run's ``attention`` record.

    A str enum: ``info.attention["reason"] == Attention.DETERMINISM`` holds for the
    plain strings stored in every backend. Some values keep the spelling earlier
    releases stored (an exception's type name).
    """

    #: A non-idempotent effect recorded its intent but no outcome: ``reconcile`` it.
    UNKNOWN_OUTCOME = "unknown-outcome"
    #: Cancellation ran the compensations and one failed for good.
    COMPENSATION_FAILED = "compensation-failed"
    #: The code asks for other steps than the history recorded (deploy compatible
    #: code, then ``resume``).
    DETERMINISM = "determinism"
    #: A stored history record cannot be read back.
    CORRUPT_HISTORY = "CorruptHistoryError"
    #: A stored value (input, result, payload) cannot be decoded.
    CORRUPT_VALUE = "SerializationError"
    #: The substrate refuses the run's records for good (schema, permissions).
    SUBSTRATE = "SubstrateError"
    #: The substrate gave up recovering the run (DBOS's dead letter).
    MAX_RECOVERY_ATTEMPTS = "max-recovery-attempts"


def unknown_outcome(
    key: str,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    intent_at: float | None,
    message: str | None = None,
) -> dict[str, Any]:
    """The attention record of an effect whose outcome nobody knows."""
    try:
        shown_args: Any = to_jsonable({"args": list(args), "kwargs": kwargs})
    except Exception:  # shown to an operator only: never fail the park over it
        shown_args = redaction.redact_text(repr((args, kwargs)))
    return {
        "reason": Attention.UNKNOWN_OUTCOME.value,
        "step_key": key,
        "name": name,
        "arguments": shown_args,
        "intent_at": intent_at if intent_at is not None else time.time(),
        "message": message
        or "the process died after recording the intent and before "
        "recording the outcome; the receiver may or may not have acted",
    }


def compensation_failed(step_key: str, message: str, compensated: list[str]) -> dict[str, Any]:
    """The attention record of a cancellation whose compensation ``step_key`` failed."""
    return {
        "reason": Attention.COMPENSATION_FAILED.value,
        "step_key": step_key,
        "message": message,
        "compensated": compensated,
    }


def broken_attention(exc: BaseException) -> dict[str, Any]:
    """The attention record of a run whose history and code disagree, or whose
    history cannot be read."""
    if isinstance(exc, DeterminismError):
        return {
            "reason": Attention.DETERMINISM.value,
            "message": str(exc),
            "step_key": exc.step_key,
        }
    if isinstance(exc, CorruptHistoryError):
        # A stored record cannot be read back: name which one.
        return {
            "reason": Attention.CORRUPT_HISTORY.value,
            "message": str(exc),
            "seq": exc.seq,
            "step_key": exc.step_key,
        }
    if isinstance(exc, SubstrateError):
        return {"reason": Attention.SUBSTRATE.value, "message": str(exc)}
    if isinstance(exc, SerializationError):
        return {"reason": Attention.CORRUPT_VALUE.value, "message": str(exc)}
    # A stored value of the wrong shape (a decoder met a list for a dict, ...).
    return {"reason": Attention.CORRUPT_VALUE.value, "message": f"{type(exc).__name__}: {exc}"}
