"""Who the operator is: a shared-secret login kept in a signed session cookie, and the
CSRF token every form that acts carries. With the token authorizer
(``perdure._tokens``), the login also takes the operator's signed token: its subject is
the operator, and every action carries it to the ``Authorizer``."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from perdure._errors import PerdureError
from perdure._tokens import verify_token

#: The session cookie lives this long without a new login.
SESSION_SECONDS = 8 * 3600
COOKIE = "perdure_console"
#: An operator name is recorded in history (``by=``): short, printable, no markup.
_NAME = re.compile(r"^[\w.@+-][\w .@+-]{0,63}$")


class LoginError(ValueError):
    """The login form was wrong; the message says what, never the secret."""


@dataclass(frozen=True, slots=True)
class SharedSecret:
    """Operators log in with a name of their choice and one secret they share.

    The session cookie is signed with a key derived from the secret, so a restarted
    console keeps its sessions and changing the secret ends them all.
    """

    secret: str

    def __post_init__(self) -> None:
        if len(self.secret) < 8:
            raise ValueError("the console secret must be at least 8 characters")

    @property
    def session_key(self) -> str:
        return hmac.new(
            self.secret.encode(), b"perdure-console-session", hashlib.sha256
        ).hexdigest()

    def login(self, name: str, secret: str, token: str = "") -> str:
        """The operator's identity (a ``token``'s subject, when one is given), or
        ``LoginError``."""
        if not hmac.compare_digest(secret.encode(), self.secret.encode()):
            raise LoginError("wrong secret")
        if token:
            try:
                return str(verify_token(token)["sub"])
            except PerdureError as exc:  # never shows the token
                raise LoginError(f"the operator token does not verify: {exc}") from None
        name = " ".join(name.split())
        if not _NAME.match(name):
            raise LoginError(
                "the name must be 1-64 letters, digits, spaces or . @ + - _ "
                "(it is recorded in run histories)"
            )
        return name


def _session(request: Request) -> dict[str, Any]:
    session: dict[str, Any] = request.session
    return session


def operator(request: Request) -> str | None:
    """The logged-in operator of this request, if any."""
    name = _session(request).get("operator")
    return name if isinstance(name, str) else None


def sign_in(request: Request, name: str) -> None:
    session = _session(request)
    session.clear()  # a new session id and CSRF token at each login: no fixation
    session["operator"] = name
    session["csrf"] = secrets.token_urlsafe(32)


def sign_out(request: Request, tokens: SessionTokens) -> None:
    tokens.forget(request)
    _session(request).clear()


class SessionTokens:
    """The operator tokens of logged-in sessions, held by this console process only:
    the session cookie is signed, not encrypted, and a token is good outside the
    console too. A restarted console asks for the token again."""

    def __init__(self) -> None:
        self._by_ref: dict[str, str] = {}

    def keep(self, request: Request, token: str) -> None:
        ref = secrets.token_urlsafe(24)
        self._by_ref[ref] = token
        _session(request)["token_ref"] = ref

    def token(self, request: Request) -> str | None:
        ref = _session(request).get("token_ref")
        return self._by_ref.get(ref) if isinstance(ref, str) else None

    def forget(self, request: Request) -> None:
        ref = _session(request).get("token_ref")
        if isinstance(ref, str):
            self._by_ref.pop(ref, None)


def csrf_token(request: Request) -> str:
    """This session's CSRF token (created on first use, also before login)."""
    session = _session(request)
    token = session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def csrf_ok(request: Request, submitted: str | None) -> bool:
    token = _session(request).get("csrf")
    return (
        isinstance(token, str)
        and isinstance(submitted, str)
        and hmac.compare_digest(token.encode(), submitted.encode())
    )


def bearer_ok(request: Request, token: str | None) -> bool:
    """Whether the request carries ``Authorization: Bearer <token>`` (never without one)."""
    if not token:
        return False
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
