"""Operator actions on a run, each authorized first: approve, reject, signal, cancel,
resume, reconcile.

``Backend`` inherits these: every way in (``backend.signal``, ``RunHandle``, the
adapters' handles, the API, the CLI, the console) is one of these methods, so one
``Authorizer`` (``perdure._authorization``) decides for every surface and its decision,
with the authenticated identity, is recorded with the action: in the
``signal_received`` event of a signal or an approval, in the ``reconciled`` event of a
reconcile, in the ``reconciled`` event (outcome ``resume``) of a resume, and in the
``cancel_requested`` event the drive records when it carries a cancel out.

A substrate implements only the acting half (``_signal``, ``_cancel``, ``_resume``,
``_reconcile``), which takes the decision as already made.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, cast

from perdure._authorization import Authorizer, Decision, Verb, authorize
from perdure._errors import ApprovalNotPendingError, InvalidInputError, InvalidRunStateError
from perdure._records import RunInfo
from perdure._semantics import approvals, events
from perdure._validation import check_name

__all__ = ["Answer", "Caller", "OperatorActions", "ReconcileOutcome"]

ReconcileOutcome = Literal["succeeded", "failed", "retry"]

#: Signal names perdure delivers to itself (the cancel record); no caller may send one.
RESERVED_PREFIX = "perdure:"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: the identity named (``by``), the signed ``token`` presented, and the
    authorizer to ask (an object, a configured name, or ``None`` for the one in force)."""

    by: str | None = None
    token: str | None = None
    authorizer: Authorizer | str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """An approval or rejection as delivered: the request it answered and the decision."""

    request: str
    decision: Decision


class OperatorActions(ABC):
    """The authorized operator verbs of a ``Backend``, over the substrate's acting half."""

    @abstractmethod
    async def get_run(self, run_id: str) -> RunInfo: ...

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
    ) -> Decision:
        """Deliver signal ``name`` once the authorizer allows it; a run waiting for it
        resumes. A signal naming an approval (``approval`` or ``approval:<request>``) is
        authorized as the approval (or rejection) its payload says, not as a plain
        signal, and is taken only while that request is pending."""
        check_name(name, "signal name")
        if name.startswith(RESERVED_PREFIX):
            raise InvalidInputError(
                "signal name", name, f"names starting {RESERVED_PREFIX!r} are perdure's own"
            )
        verb: Verb = "signal"
        if approvals.is_approval(name):
            fields = cast(dict[str, Any], payload) if isinstance(payload, dict) else {}
            verb = "approve" if fields.get("approved") is True else "reject"
        decision = await self._decide(verb, run_id, Caller(by, token, authorizer), target=name)
        await self._signal(
            run_id, name, payload, by=decision.actor, authorization=decision.record()
        )
        return decision

    async def approve(
        self,
        run_id: str,
        request: str | None = None,
        *,
        message: str | None = None,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
        info: RunInfo | None = None,
    ) -> Answer:
        """Approve approval request ``request`` of the run, by default the one pending
        now (``info`` is the run as the caller just read it, to answer what was shown).
        ``ApprovalNotPendingError`` when it is not pending; ``AuthorizationError`` when
        the caller may not."""
        caller = Caller(by, token, authorizer)
        return await self._answer(run_id, True, request, message, caller, info)

    async def reject(
        self,
        run_id: str,
        request: str | None = None,
        *,
        message: str | None = None,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
        info: RunInfo | None = None,
    ) -> Answer:
        """Reject approval request ``request`` of the run (as ``approve``); ``message``
        is what the run is told."""
        caller = Caller(by, token, authorizer)
        return await self._answer(run_id, False, request, message, caller, info)

    async def cancel(
        self,
        run_id: str,
        *,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
    ) -> RunInfo:
        """Request cancellation once the authorizer allows it; completed steps with
        compensations are compensated."""
        decision = await self._decide("cancel", run_id, Caller(by, token, authorizer))
        # Delivered first, so the drive that carries the cancel out finds it and records it.
        try:
            await self._signal(
                run_id,
                events.CANCEL_RECORD,
                None,
                by=decision.actor,
                authorization=decision.record(),
            )
        except InvalidRunStateError:
            pass  # the run has ended: the cancel says so in its own words
        return await self._cancel(run_id)

    async def resume(
        self,
        run_id: str,
        *,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
    ) -> RunInfo:
        """Make a suspended or parked run due again now (after a fix or a deploy), once
        the authorizer allows it."""
        decision = await self._decide("resume", run_id, Caller(by, token, authorizer))
        return await self._resume(run_id, by=decision.actor, authorization=decision.record())

    async def reconcile(
        self,
        run_id: str,
        step_key: str,
        outcome: ReconcileOutcome,
        *,
        result: Any = None,
        message: str | None = None,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
    ) -> RunInfo:
        """Resolve a parked effect, once the authorizer allows it: it ``succeeded``
        (with ``result``), ``failed``, or should be tried again (``retry``). The run
        becomes due."""
        check_name(step_key, "step key")
        caller = Caller(by, token, authorizer)
        decision = await self._decide("reconcile", run_id, caller, target=step_key)
        return await self._reconcile(
            run_id,
            step_key,
            outcome,
            result=result,
            message=message,
            by=decision.actor,
            authorization=decision.record(),
        )

    async def _decide(
        self,
        verb: Verb,
        run_id: str,
        caller: Caller,
        *,
        target: str | None = None,
        info: RunInfo | None = None,
    ) -> Decision:
        check_name(run_id, "run id")
        if caller.by is not None:
            check_name(caller.by, "identity")
        info = info if info is not None else await self.get_run(run_id)
        return authorize(
            verb,
            info,
            target=target,
            by=caller.by,
            token=caller.token,
            authorizer=caller.authorizer,
        )

    async def _answer(
        self,
        run_id: str,
        approved: bool,
        request: str | None,
        message: str | None,
        caller: Caller,
        info: RunInfo | None,
    ) -> Answer:
        check_name(run_id, "run id")
        info = info if info is not None else await self.get_run(run_id)
        if request is None:
            if info.request_id is None and info.waiting_for == approvals.APPROVAL:
                raise ApprovalNotPendingError(run_id, None, approvals.BEFORE_REQUEST_IDS)
            if info.request_id is None:
                raise ApprovalNotPendingError(
                    run_id, None, f"the run is {info.status.value} and waits for no approval"
                )
            request = info.request_id
        verb: Verb = "approve" if approved else "reject"
        decision = await self._decide(verb, run_id, caller, target=request, info=info)
        await self._signal(
            run_id,
            approvals.channel(request),
            {"approved": approved, "message": message},
            by=decision.actor,
            authorization=decision.record(),
        )
        return Answer(request, decision)

    # The substrate's half: each acts on a decision already made and recorded with it.

    @abstractmethod
    async def _signal(
        self,
        run_id: str,
        name: str,
        payload: Any,
        *,
        by: str,
        authorization: dict[str, Any],
    ) -> None:
        """Deliver a signal; a run waiting for it resumes. An answer to an approval
        request (``perdure._semantics.approvals``) is taken only while it is pending.
        ``authorization`` (``Decision.record()``) is recorded with the signal."""

    @abstractmethod
    async def _cancel(self, run_id: str) -> RunInfo:
        """Request cancellation (its record was delivered just before, as a signal)."""

    @abstractmethod
    async def _resume(self, run_id: str, *, by: str, authorization: dict[str, Any]) -> RunInfo:
        """Make the run due again; ``by`` and ``authorization`` are recorded in the
        ``reconciled`` event (outcome ``resume``)."""

    @abstractmethod
    async def _reconcile(
        self,
        run_id: str,
        step_key: str,
        outcome: ReconcileOutcome,
        *,
        result: Any,
        message: str | None,
        by: str,
        authorization: dict[str, Any],
    ) -> RunInfo:
        """Resolve a parked effect; ``authorization`` is recorded in the ``reconciled``
        event."""
