"""What an operation may do to a run in its current status: one check each.

A ``Store`` runs them inside the transaction that reads the status (so the check and
the write agree); a backend without one calls them on the ``RunInfo`` it just read.
Each raises ``InvalidRunStateError`` naming the run and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from perdure._errors import InvalidRunStateError
from perdure._records import RunInfo, RunStatus
from perdure._semantics.attention import Attention

__all__ = [
    "RECONCILABLE",
    "RESUMABLE",
    "check_can_cancel",
    "check_can_reconcile",
    "check_can_resume",
    "check_can_signal",
    "check_expected",
]

#: Statuses ``resume`` applies to; it leaves the run suspended and due now.
RESUMABLE = (RunStatus.SUSPENDED, RunStatus.NEEDS_ATTENTION)
#: Statuses ``reconcile`` applies to; it leaves the run suspended and due now.
RECONCILABLE = (RunStatus.NEEDS_ATTENTION,)


def check_can_signal(run_id: str, status: RunStatus) -> None:
    """A signal may go to any run that has not ended (it waits in the inbox)."""
    if status.terminal:
        raise InvalidRunStateError(f"run {run_id!r} is {status.value}; it takes no signals")


def check_can_cancel(run_id: str, status: RunStatus) -> None:
    """Cancellation may be asked of any run that has not ended."""
    if status.terminal:
        raise InvalidRunStateError(f"run {run_id!r} is already {status.value}")


def check_expected(run_id: str, status: RunStatus, expect: Sequence[RunStatus]) -> None:
    """An operator's write (``Store.admin_append``) applies only in ``expect``."""
    if status not in expect:
        raise InvalidRunStateError(
            f"run {run_id!r} is {status.value}; expected "
            + " or ".join(RunStatus(s).value for s in expect)
        )


def check_can_resume(info: RunInfo) -> None:
    """``resume`` re-drives a suspended or parked run, but never one parked on an
    effect's unknown outcome: that would call the effect blindly."""
    attention = info.attention or {}
    if attention.get("reason") == Attention.UNKNOWN_OUTCOME:
        raise InvalidRunStateError(
            f"run {info.run_id!r} waits for the outcome of step "
            f"{attention.get('step_key')!r}; use reconcile, not resume"
        )
    check_expected(info.run_id, info.status, RESUMABLE)


def check_can_reconcile(info: RunInfo, step_key: str) -> None:
    """``reconcile`` answers the run's parked step, and only that one."""
    parked = (info.attention or {}).get("step_key")
    if info.status is not RunStatus.NEEDS_ATTENTION or parked != step_key:
        raise InvalidRunStateError(
            f"run {info.run_id!r} has no unknown outcome at step {step_key!r} "
            f"(status {info.status.value}, parked step {parked!r})"
        )
