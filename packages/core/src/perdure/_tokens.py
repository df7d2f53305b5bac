"""Signed operator tokens: a verifiable identity for approvals from a bot or a console.

A token is ``pdt1.<claims>.<signature>``: the claims are base64url JSON, the signature
is HMAC-SHA256 (the standard library's ``hmac``) over ``pdt1.<claims>`` with a key
shared between whoever issues tokens (``perdure token issue``, ``issue_token``) and
whoever verifies them (the CLI, the API, the console with ``authorizer = "token"``).

Claims: ``sub`` (the identity recorded in history), ``exp`` (expiry, Unix seconds) and
optional scope lists, each a set of ``fnmatch`` patterns, absent meaning any:
``verbs`` (approve, reject, signal, cancel, resume, reconcile), ``workflows``,
``tools`` and ``runs``. The key is 32 bytes or more, given as base64 or hex in
``PERDURE_AUTH_KEY``, else read from the file named by ``PERDURE_AUTH_KEY_FILE`` or
``[tool.perdure] auth_key_file``.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import json
import os
import time
from collections.abc import Sequence
from typing import Any, cast

from perdure._authorization import Action, AuthenticationError, Decision
from perdure._errors import ConfigurationError
from perdure._key_material import KeySource, decode_key

__all__ = ["TokenAuthorizer", "issue_token", "load_key", "verify_token"]

_PREFIX = "pdt1"
_SCOPES = ("verbs", "workflows", "tools", "runs")
#: A token longer than this is refused before any decoding.
_MAX_TOKEN = 8192


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_SOURCE = KeySource(
    "PERDURE_AUTH_KEY", "PERDURE_AUTH_KEY_FILE", "auth_key_file", "authorization key"
)


def _decode_key(raw: str, where: str) -> bytes:
    return decode_key(
        raw,
        where,
        what="an authorization key",
        fits=lambda key: len(key) >= 32,
        size="32 bytes or more",
    )


def load_key(key: bytes | str | None = None) -> bytes:
    """The shared key: the argument, else ``PERDURE_AUTH_KEY``, else the key file."""
    if isinstance(key, bytes):
        if len(key) < 32:
            raise ConfigurationError("an authorization key must be at least 32 bytes")
        return key
    if key:
        return _decode_key(key, "the authorization key")
    found = _SOURCE.text()
    if found is None:
        raise ConfigurationError(
            "the token authorizer needs its key: set PERDURE_AUTH_KEY, "
            "PERDURE_AUTH_KEY_FILE or [tool.perdure] auth_key_file"
        )
    return _decode_key(*found)


def _sign(key: bytes, body: str) -> str:
    return _b64url(hmac.new(key, body.encode("ascii"), hashlib.sha256).digest())


def issue_token(
    subject: str,
    *,
    key: bytes | str | None = None,
    ttl: float = 3600.0,
    verbs: Sequence[str] | None = None,
    workflows: Sequence[str] | None = None,
    tools: Sequence[str] | None = None,
    runs: Sequence[str] | None = None,
    now: float | None = None,
) -> str:
    """A token for ``subject``, valid ``ttl`` seconds, limited to the scopes given."""
    if not subject:
        raise ConfigurationError("a token needs a subject (the identity it carries)")
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {"sub": subject, "iat": issued, "exp": issued + ttl}
    for name, value in zip(_SCOPES, (verbs, workflows, tools, runs), strict=True):
        if value is not None:
            claims[name] = list(value)
    body = _PREFIX + "." + _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return body + "." + _sign(load_key(key), body)


def verify_token(
    token: str, *, key: bytes | str | None = None, now: float | None = None
) -> dict[str, Any]:
    """The claims of a token signed with the key and not expired, else
    ``AuthenticationError`` (which never shows the token)."""
    if len(token) > _MAX_TOKEN:
        raise AuthenticationError("the token is not a perdure token")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise AuthenticationError("the token is not a perdure token (pdt1.<claims>.<signature>)")
    body = parts[0] + "." + parts[1]
    if not hmac.compare_digest(_sign(load_key(key), body), parts[2]):
        raise AuthenticationError("the token's signature does not verify with the key")
    try:
        claims: Any = json.loads(_unb64url(parts[1]))
    except (ValueError, binascii.Error):
        raise AuthenticationError("the token's claims are not readable") from None
    if not isinstance(claims, dict):
        raise AuthenticationError("the token's claims are not a JSON object")
    record = cast(dict[str, Any], claims)
    subject = record.get("sub")
    expiry = record.get("exp")
    if not isinstance(subject, str) or not subject:
        raise AuthenticationError("the token names no subject")
    if isinstance(expiry, bool) or not isinstance(expiry, int | float):
        raise AuthenticationError("the token has no expiry")
    if (time.time() if now is None else now) >= expiry:
        raise AuthenticationError(f"the token of {subject!r} has expired")
    for name in _SCOPES:
        scope = record.get(name)
        if scope is not None and not (
            isinstance(scope, list) and all(isinstance(p, str) for p in cast(list[Any], scope))
        ):
            raise AuthenticationError(f"the token's {name} scope is not a list of patterns")
    return record


def _allows(patterns: Any, value: str | None) -> bool:
    if patterns is None:
        return True
    if value is None:
        return False
    return any(fnmatch.fnmatchcase(value, p) for p in cast(list[str], patterns))


class TokenAuthorizer:
    """Identity from a signed token; the token's scope decides."""

    name = "token"

    def __init__(self, key: bytes | str | None = None) -> None:
        self.key = load_key(key)

    @classmethod
    def from_config(cls) -> TokenAuthorizer:
        return cls()

    def decide(self, action: Action, *, by: str | None, token: str | None) -> Decision:
        token = token or os.environ.get("PERDURE_TOKEN")
        if not token:
            raise AuthenticationError(
                "the token authorizer requires a signed token: pass --token "
                "(token= in the API) or set PERDURE_TOKEN"
            )
        claims = verify_token(token, key=self.key)
        actor = str(claims["sub"])
        if by and by != actor:
            raise AuthenticationError(
                f"--by {by!r} is not the token's subject {actor!r}; omit --by"
            )
        checks = (
            ("verbs", action.verb),
            ("workflows", action.workflow),
            ("tools", action.tool),
            ("runs", action.run_id),
        )
        for scope, value in checks:
            if not _allows(claims.get(scope), value):
                return Decision(
                    actor=actor,
                    allowed=False,
                    authorizer=self.name,
                    verified=True,
                    reason=f"the token's {scope} scope does not cover {value!r}",
                    claims=claims,
                )
        return Decision(
            actor=actor,
            allowed=True,
            authorizer=self.name,
            verified=True,
            reason="signed token; its scope covers the action",
            claims=claims,
        )
