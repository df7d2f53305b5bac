"""Approvals are requests with ids, answered at most once, and only while pending.

A wait for the signal ``approval`` (``wait_for_signal(APPROVAL)``) is an approval
request. Its id is derived from the run id and the wait's step key, so every replay of
the wait, on every backend, names the same request, and an id names one run's request
only. The run's ``waiting_for`` is stored as the request's *channel*,
``approval:<request id>``, and the answer is stored in the inbox under that channel: the
wait consumes only the answer to its own request, so nothing sent before the wait began
(or for another request) can satisfy it. Readers show the channel split back into
``RunInfo.waiting_for == "approval"`` and ``RunInfo.request_id`` (``present``).

Delivering an answer (``signal(run, "approval:<id>", ...)``, or ``"approval"`` for
whichever request is pending at that instant) goes through ``answer_channel`` inside
the write that stores it: it is accepted only while that request is pending, and
storing it clears ``waiting_for`` (and the pending details in ``attention``), so of
two concurrent answers exactly one is stored and the other gets
``ApprovalNotPendingError``. Plain signals (any other name) keep the
inbox semantics: they may arrive before their wait.
"""

from __future__ import annotations

import dataclasses
import hashlib

from perdure._errors import ApprovalNotPendingError, InvalidRunStateError
from perdure._records import RunInfo, RunStatus

__all__ = [
    "APPROVAL",
    "BEFORE_REQUEST_IDS",
    "answer_channel",
    "channel",
    "is_approval",
    "present",
    "request_id",
    "request_of",
]

#: The signal an approval wait waits for.
APPROVAL = "approval"
_PREFIX = APPROVAL + ":"


def request_id(run_id: str, step_key: str) -> str:
    """The id of the approval request the wait at ``step_key`` of ``run_id`` makes."""
    digest = hashlib.sha256(f"{run_id}\x00{step_key}".encode()).hexdigest()
    return digest[:16]


def channel(request: str) -> str:
    """The inbox name (and stored ``waiting_for``) of approval request ``request``."""
    return _PREFIX + request


def request_of(name: str | None) -> str | None:
    """The request id a channel name holds, else ``None``."""
    if name is None or not name.startswith(_PREFIX):
        return None
    return name[len(_PREFIX) :] or None


#: Why a run that suspended on an approval before approvals had request ids (its stored
#: ``waiting_for`` is the bare ``approval``) takes no answer yet, and what to do.
BEFORE_REQUEST_IDS = (
    "the run suspended on an approval before approvals had request ids; "
    "`perdure resume RUN` re-asks it with one, then approve that request"
)


def is_approval(name: str) -> bool:
    """Whether a signal called ``name`` answers an approval request (bare or named)."""
    return name == APPROVAL or name.startswith(_PREFIX)


def present(info: RunInfo) -> RunInfo:
    """``info`` as callers see it: a stored channel shown as ``waiting_for`` ``approval``
    with the request in ``request_id``. ``info`` itself is left unchanged."""
    pending = request_of(info.waiting_for)
    if pending is None:
        return info
    return dataclasses.replace(info, waiting_for=APPROVAL, request_id=pending)


def answer_channel(run_id: str, status: RunStatus, waiting_for: str | None, name: str) -> str:
    """The channel an answer called ``name`` is stored under, checked against the run as
    it is inside the delivering write (status and stored ``waiting_for``).

    ``name`` is ``approval`` (the request pending now) or ``approval:<id>`` (that
    request). Raises ``InvalidRunStateError`` for an ended run and
    ``ApprovalNotPendingError`` when the request is not pending. The caller stores the
    answer under the returned channel and clears the run's ``waiting_for`` in the same
    write, which is what makes a second answer to the request fail here.
    """
    if status.terminal:
        raise InvalidRunStateError(f"run {run_id!r} is {status.value}; it takes no signals")
    named = None if name == APPROVAL else request_of(name)
    if name != APPROVAL and named is None:
        raise ApprovalNotPendingError(run_id, None, f"{name!r} names no request")
    pending = request_of(waiting_for) if status is RunStatus.SUSPENDED else None
    if pending is None and status is RunStatus.SUSPENDED and waiting_for == APPROVAL:
        raise ApprovalNotPendingError(run_id, named, BEFORE_REQUEST_IDS)
    if pending is None:
        why = (
            f"the run is {status.value}"
            if status is not RunStatus.SUSPENDED
            else "the run waits for no approval (not asked yet, or already answered)"
        )
        raise ApprovalNotPendingError(run_id, named, why)
    if named is not None and named != pending:
        raise ApprovalNotPendingError(
            run_id, named, f"the request pending is {pending!r} (this one was answered or moved on)"
        )
    return channel(pending)
