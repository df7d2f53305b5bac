"""Operator actions on a run, each authorized first: approve, reject, signal, cancel,
resume, reconcile.

The API (``perdure.approve`` ...), the CLI and the console all act through these, so
one ``Authorizer`` (``perdure.authorization``) decides for every surface and its
decision, with the authenticated identity, is recorded with the action: in the
``signal_received`` event of a signal or an approval, in the ``reconciled`` event of a
reconcile, in the ``reconciled`` event (outcome ``resume``) of a resume, and in the
``cancel_requested`` event the drive records when it carries a cancel out.
"""

from __future__ import annotations

from typing import Any, cast

from perdure.authorization import Authorizer, Decision, Verb, authorize
from perdure.backend import Backend, ReconcileOutcome
from perdure.errors import ApprovalNotPendingError, InvalidRunStateError
from perdure.records import RunInfo
from perdure.semantics import approvals, events

__all__ = ["answer", "cancel", "reconcile", "resume", "send"]

AuthorizerArg = Authorizer | str | None


async def answer(
    backend: Backend,
    run_id: str,
    approved: bool,
    *,
    request: str | None = None,
    message: str | None = None,
    by: str | None = None,
    token: str | None = None,
    authorizer: AuthorizerArg = None,
    info: RunInfo | None = None,
) -> tuple[str, Decision]:
    """Approve (or reject) approval request ``request`` of the run, by default the one
    pending now; the request answered and the decision. ``ApprovalNotPendingError``
    when it is not pending; ``AuthorizationError`` when the caller may not."""
    info = info if info is not None else await backend.get_run(run_id)
    if request is None:
        if info.request_id is None and info.waiting_for == approvals.APPROVAL:
            raise ApprovalNotPendingError(run_id, None, approvals.BEFORE_REQUEST_IDS)
        if info.request_id is None:
            raise ApprovalNotPendingError(
                run_id, None, f"the run is {info.status.value} and waits for no approval"
            )
        request = info.request_id
    verb: Verb = "approve" if approved else "reject"
    decision = await authorize(
        backend, verb, run_id, target=request, by=by, token=token, authorizer=authorizer, info=info
    )
    await backend.signal(
        run_id,
        approvals.channel(request),
        {"approved": approved, "message": message},
        by=decision.actor,
        authorization=decision.record(),
    )
    return request, decision


async def send(
    backend: Backend,
    run_id: str,
    name: str,
    payload: Any = None,
    *,
    by: str | None = None,
    token: str | None = None,
    authorizer: AuthorizerArg = None,
) -> Decision:
    """Deliver signal ``name``; a signal naming an approval is authorized as the approval
    (or rejection) its payload says, not as a plain signal."""
    verb: Verb = "signal"
    if approvals.is_approval(name):
        fields = cast(dict[str, Any], payload) if isinstance(payload, dict) else {}
        verb = "approve" if fields.get("approved") is True else "reject"
    decision = await authorize(
        backend, verb, run_id, target=name, by=by, token=token, authorizer=authorizer
    )
    await backend.signal(run_id, name, payload, by=decision.actor, authorization=decision.record())
    return decision


async def cancel(
    backend: Backend,
    run_id: str,
    *,
    by: str | None = None,
    token: str | None = None,
    authorizer: AuthorizerArg = None,
) -> RunInfo:
    decision = await authorize(backend, "cancel", run_id, by=by, token=token, authorizer=authorizer)
    # Delivered first, so the drive that carries the cancel out finds it and records it.
    try:
        await backend.signal(
            run_id, events.CANCEL_RECORD, None, by=decision.actor, authorization=decision.record()
        )
    except InvalidRunStateError:
        pass  # the run has ended: the cancel says so in its own words
    return await backend.cancel(run_id)


async def resume(
    backend: Backend,
    run_id: str,
    *,
    by: str | None = None,
    token: str | None = None,
    authorizer: AuthorizerArg = None,
) -> RunInfo:
    decision = await authorize(backend, "resume", run_id, by=by, token=token, authorizer=authorizer)
    return await backend.resume(run_id, by=decision.actor, authorization=decision.record())


async def reconcile(
    backend: Backend,
    run_id: str,
    step_key: str,
    outcome: ReconcileOutcome,
    *,
    result: Any = None,
    message: str | None = None,
    by: str | None = None,
    token: str | None = None,
    authorizer: AuthorizerArg = None,
) -> RunInfo:
    decision = await authorize(
        backend,
        "reconcile",
        run_id,
        target=step_key,
        by=by,
        token=token,
        authorizer=authorizer,
    )
    return await backend.reconcile(
        run_id,
        step_key,
        outcome,
        result=result,
        message=message,
        by=decision.actor,
        authorization=decision.record(),
    )
