"""What an operator can do to a run from the console: the same authorized backend verbs
(``perdure._operator``) as the CLI, each recorded with the operator as ``by``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from perdure._backend import Backend, ReconcileOutcome
from perdure._errors import PerdureError
from perdure._records import RunInfo

ActionName = Literal["approve", "reject", "cancel", "resume", "reconcile"]
ACTIONS: tuple[ActionName, ...] = ("approve", "reject", "cancel", "resume", "reconcile")


class ActionRefused(PerdureError):
    """The operator may not do this (to this run)."""


class ActionInvalid(PerdureError):
    """The form does not describe an action the run can take."""


@dataclass(frozen=True, slots=True)
class Action:
    name: ActionName
    run_id: str
    message: str | None = None
    step_key: str | None = None
    outcome: ReconcileOutcome | None = None
    result: Any = None
    #: The approval request the operator saw (approve/reject): answering it fails once
    #: it is no longer pending, rather than answering a later request of the run.
    request: str | None = None


#: ``authorize(operator, action, run)`` raises ``ActionRefused`` to refuse. The console
#: calls it once before every action; it is where the core ``Authorizer`` plugs in.
Authorize = Callable[[str, Action, RunInfo], Awaitable[None]]


async def any_operator(operator: str, action: Action, run: RunInfo) -> None:
    """The default policy: every logged-in operator may do every action."""
    if not operator:
        raise ActionRefused(f"{action.name} of run {run.run_id!r}: no operator logged in")


def parse_action(name: str, run_id: str, form: dict[str, str]) -> Action:
    """The action a submitted form asks for, or ``ActionInvalid`` saying what is wrong."""
    if name not in ACTIONS:
        raise ActionInvalid(f"unknown action {name!r}; one of {', '.join(ACTIONS)}")
    action: ActionName = name  # pyright: ignore[reportAssignmentType]
    message = form.get("message", "").strip() or None
    if action in ("approve", "reject"):
        request = form.get("request", "").strip() or None
        return Action(action, run_id, message=message, request=request)
    if action != "reconcile":
        return Action(action, run_id, message=message)
    step_key = form.get("step_key", "").strip()
    outcome = form.get("outcome", "")
    if not step_key:
        raise ActionInvalid("reconcile needs the parked step's key (step_key)")
    if outcome not in ("succeeded", "failed", "retry"):
        raise ActionInvalid(f"reconcile outcome {outcome!r}: one of succeeded, failed, retry")
    result: Any = None
    raw = form.get("result", "").strip()
    if raw and outcome == "succeeded":
        try:
            result = json.loads(raw)
        except ValueError as exc:
            raise ActionInvalid(f"the result is not JSON: {exc}") from None
    return Action(
        action,
        run_id,
        message=message,
        step_key=step_key,
        outcome=outcome,  # pyright: ignore[reportArgumentType]
        result=result,
    )


async def perform(
    backend: Backend,
    operator: str,
    action: Action,
    authorize: Authorize = any_operator,
    token: str | None = None,
) -> str:
    """Authorize, then do ``action`` as ``operator``; what happened, in one sentence.

    ``authorize`` is the console's own check; every action then goes through the
    backend's authorized verbs with the operator's login as the identity (and the signed
    ``token`` the operator logged in with, if any), so the core ``Authorizer`` in force
    decides too and its decision is recorded in history."""
    run = await backend.get_run(action.run_id)
    await authorize(operator, action, run)
    if action.name in ("approve", "reject"):
        approved = action.name == "approve"
        answer = backend.approve if approved else backend.reject
        await answer(
            action.run_id,
            action.request,
            message=action.message,
            by=operator,
            token=token,
            info=run,
        )
        return f"{'approved' if approved else 'rejected'} as {operator}"
    if action.name == "cancel":
        info = await backend.cancel(action.run_id, by=operator, token=token)
        return "cancelled" if info.status.terminal else "cancel requested"
    if action.name == "resume":
        await backend.resume(action.run_id, by=operator, token=token)
        return "resumed: the run is due and its worker picks it up"
    assert action.step_key is not None and action.outcome is not None
    await backend.reconcile(
        action.run_id,
        action.step_key,
        action.outcome,
        result=action.result,
        message=action.message,
        by=operator,
        token=token,
    )
    return f"reconciled step {action.step_key} as {action.outcome} (by {operator})"
