"""Who may approve, reject, signal, cancel, resume or reconcile which runs.

Every operator action (``Backend.signal``/``approve``/``reject``/``cancel``/``resume``/
``reconcile``, which the handles, the API, the CLI and the console call) passes through
one ``Authorizer`` before the substrate acts. The authorizer authenticates the caller
(from the identity or the token the caller presents) and decides on the ``Action``
(which verb, which run, its workflow, the tool or step concerned); the ``Decision``,
with the authenticated identity, is recorded in the run's history with the action.

The authorizer in force is configured like the URL: the ``authorizer=`` argument, else
``PERDURE_AUTHORIZER``, else ``[tool.perdure] authorizer``, else ``actor``:

* ``actor`` (``ActorAuthorizer``): the identity is the one the caller names
  (``--by``, ``by=``, else ``PERDURE_ACTOR``); it is required to approve, reject or
  reconcile, never guessed from the OS user; every action is allowed. It proves nothing
  about who the caller is: use it where whoever can reach the CLI is trusted with the
  store anyway.
* ``token`` (``perdure._tokens.TokenAuthorizer``): the caller presents a token signed
  with the shared key (HMAC-SHA256); the identity is the token's subject, and the
  token's scope (verbs, workflow and tool patterns, runs) decides.

An ``Authorizer`` object may also be passed directly (``authorizer=``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from perdure._config import setting
from perdure._errors import ConfigurationError, PerdureError
from perdure._records import RunInfo
from perdure._validation import check_name

__all__ = [
    "VERBS",
    "Action",
    "ActorAuthorizer",
    "AuthenticationError",
    "AuthorizationError",
    "Authorizer",
    "Decision",
    "Verb",
    "action_for",
    "authorize",
    "register_authorizer",
    "resolve_authorizer",
]

Verb = Literal["approve", "reject", "signal", "cancel", "resume", "reconcile"]
VERBS: tuple[Verb, ...] = get_args(Verb)


class AuthenticationError(PerdureError):
    """The caller presented no identity, or one that does not verify (a token that is
    malformed, expired or not signed with the key). Never shows the token."""


class AuthorizationError(PerdureError):
    """The authenticated caller may not take this action on this run."""

    def __init__(self, action: Action, decision: Decision) -> None:
        super().__init__(
            f"{decision.actor!r} may not {action.verb} run {action.run_id!r} "
            f"(workflow {action.workflow!r}"
            + (f", tool {action.tool!r}" if action.tool else "")
            + f"): {decision.reason}"
        )
        self.action = action
        self.decision = decision


@dataclass(frozen=True, slots=True)
class Action:
    """What a caller asks to do."""

    verb: Verb
    run_id: str
    workflow: str
    #: The tool an approval is for (its pending details' ``tool``) or the step a
    #: reconcile names; ``None`` when there is none.
    tool: str | None = None
    #: The signal name (``signal``) or the approval request (``approve``/``reject``).
    target: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorizer's verdict on an ``Action``, as recorded in history."""

    actor: str
    allowed: bool
    authorizer: str
    #: True when the identity was verified (a signed token), False when it is only the
    #: name the caller gave.
    verified: bool
    reason: str
    claims: dict[str, Any] = field(default_factory=lambda: {})

    def record(self) -> dict[str, Any]:
        """The decision as history records it (JSON data, no secret)."""
        return {
            "actor": self.actor,
            "allowed": self.allowed,
            "authorizer": self.authorizer,
            "verified": self.verified,
            "reason": self.reason,
        }


@runtime_checkable
class Authorizer(Protocol):
    """Authenticates a caller and decides on an action."""

    name: str

    def decide(self, action: Action, *, by: str | None, token: str | None) -> Decision:
        """The decision (``allowed`` False to refuse); ``AuthenticationError`` when the
        caller's identity is missing or does not verify."""
        ...


#: What ``ActorAuthorizer`` records for a signal, cancel or resume nobody put a name to
#: (a LangGraph ``Command(resume=...)`` has no place for one); an approval, a rejection
#: or a reconcile decides a run's outcome, and always needs a name.
UNNAMED = "(unnamed)"

#: The verbs that decide an outcome: the actor authorizer refuses them unnamed.
NAMED_VERBS: frozenset[Verb] = frozenset({"approve", "reject", "reconcile"})


def _actor(by: str | None, verb: Verb) -> str:
    actor = by or os.environ.get("PERDURE_ACTOR")
    if not actor:
        if verb not in NAMED_VERBS:
            return UNNAMED
        raise AuthenticationError(
            f"an identity is required to {verb}: pass --by NAME (by= in the API) "
            "or set PERDURE_ACTOR"
        )
    return check_name(actor, "identity")


class ActorAuthorizer:
    """The default: the identity is the name the caller gives (required to approve,
    reject or reconcile; ``(unnamed)`` is recorded for a signal, cancel or resume nobody
    named); everything is allowed. The history records that the
    name was not verified."""

    name = "actor"

    def decide(self, action: Action, *, by: str | None, token: str | None) -> Decision:
        return Decision(
            actor=_actor(by, action.verb),
            allowed=True,
            authorizer=self.name,
            verified=False,
            reason="the actor authorizer allows every named caller",
        )


def _token_authorizer() -> Authorizer:
    from perdure._tokens import TokenAuthorizer

    return TokenAuthorizer.from_config()


_FACTORIES: dict[str, Callable[[], Authorizer]] = {
    "actor": ActorAuthorizer,
    "token": _token_authorizer,
}


def register_authorizer(name: str, factory: Callable[[], Authorizer]) -> None:
    """Make ``authorizer = name`` (argument, env or pyproject) build ``factory()``."""
    _FACTORIES[name] = factory


def resolve_authorizer(authorizer: Authorizer | str | None = None) -> Authorizer:
    """The authorizer in force: the argument, else ``PERDURE_AUTHORIZER``, else
    ``[tool.perdure] authorizer``, else ``actor``."""
    if authorizer is not None and not isinstance(authorizer, str):
        return authorizer
    name = authorizer or setting("authorizer", "PERDURE_AUTHORIZER") or "actor"
    factory = _FACTORIES.get(str(name))
    if factory is None:
        raise ConfigurationError(
            f"unknown authorizer {name!r} (known: {', '.join(sorted(_FACTORIES))})"
        )
    return factory()


def action_for(verb: Verb, info: RunInfo, target: str | None = None) -> Action:
    """The ``Action`` of ``verb`` on the run as it is now: the tool of a pending
    approval comes from the wait's details; a reconcile's is the step's name."""
    tool: str | None = None
    if verb in ("approve", "reject"):
        value = (info.attention or {}).get("tool")
        tool = value if isinstance(value, str) else None
    elif verb == "reconcile" and target is not None:
        tool = target.partition(":")[2] or target
    return Action(verb=verb, run_id=info.run_id, workflow=info.workflow, tool=tool, target=target)


def authorize(
    verb: Verb,
    info: RunInfo,
    *,
    target: str | None = None,
    by: str | None = None,
    token: str | None = None,
    authorizer: Authorizer | str | None = None,
) -> Decision:
    """Authenticate the caller and decide on ``verb`` of the run as just read (``info``);
    ``AuthorizationError`` when refused."""
    action = action_for(verb, info, target)
    decision = resolve_authorizer(authorizer).decide(action, by=by, token=token)
    if not decision.allowed:
        raise AuthorizationError(action, decision)
    check_name(decision.actor, "identity")  # what history records, whoever decided
    return decision
