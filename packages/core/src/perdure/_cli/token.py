"""``perdure token issue``: a signed operator token (``perdure._tokens``) for a person, a
chat-ops bot or a console login, when the token authorizer is in force."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from perdure import _tokens as tokens
from perdure._authorization import VERBS
from perdure._cli.common import UsageProblem, parse_duration


def _patterns(values: Sequence[str] | None) -> list[str] | None:
    """Repeatable, comma-separated scope patterns; none given means any."""
    if not values:
        return None
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


def issue(
    by: str,
    ttl: str,
    verbs: Sequence[str] | None,
    workflows: Sequence[str] | None,
    tools: Sequence[str] | None,
    runs: Sequence[str] | None,
) -> None:
    """Print a token for ``by``, valid ``ttl``, limited to the scopes given."""
    seconds = parse_duration("--ttl", ttl)
    if seconds <= 0:
        raise UsageProblem("--ttl must be longer than 0s")
    verb_scope = _patterns(verbs)
    unknown = [v for v in verb_scope or [] if v not in VERBS and not set(v) & set("*?[")]
    if unknown:
        raise UsageProblem(f"--verb {unknown[0]!r} is not one of {', '.join(VERBS)}")
    token = tokens.issue_token(
        by,
        ttl=seconds,
        verbs=verb_scope,
        workflows=_patterns(workflows),
        tools=_patterns(tools),
        runs=_patterns(runs),
    )
    sys.stdout.write(token + "\n")
