"""The one place passwords are masked out of URLs and messages.

``mask_url`` is for a URL about to be shown; ``mask_text`` for any text that may quote
one (an error message, a driver's exception). Every ``PerdureError`` passes its message
through ``mask_text``, so a URL quoted in any typed error shows no password.

Masked: the password of ``scheme://user:password@host`` (also when it holds ``/`` or
``@``, which a hand-written URL may), query parameters named like a secret
(``password``, ``token``, ``api_key``...), URLs nested in query values (Temporal's
``state=``), and libpq ``password=...`` key/value pairs.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

__all__ = ["MASK", "mask_text", "mask_url"]

MASK = "***"

_SECRET_PARAM = re.compile(
    r"(?:^|[_-])(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|credentials?"
    r"|auth(?:orization)?|private[_-]?key|client[_-]?key|tls[_-]?key)$",
    re.IGNORECASE,
)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_KEYVALUE_PASSWORD = re.compile(
    r"\b(password|passwd|sslpassword|api_key|token)\s*=\s*('[^']*'|\"[^\"]*\"|[^\s,;&'\"]+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True for a parameter or key named like a secret (``password``, ``api_key``...)."""
    return bool(_SECRET_PARAM.search(name.strip()))


def mask_url(url: str) -> str:
    """``url`` with its password and secret-named query values replaced by ``***``."""
    head, sep, rest = url.partition("://")
    if not sep:
        return _mask_keyvalues(url)
    cut = len(rest)
    for mark in "?#":
        at = rest.find(mark)
        if at != -1:
            cut = min(cut, at)
    authority_and_path, tail = rest[:cut], rest[cut:]
    at = authority_and_path.rfind("@")
    if at != -1:
        userinfo = authority_and_path[:at]
        user, colon, _ = userinfo.partition(":")
        if colon:
            authority_and_path = f"{user}:{MASK}@{authority_and_path[at + 1 :]}"
    if tail.startswith("?"):
        query, hash_, fragment = tail[1:].partition("#")
        tail = "?" + _mask_query(query) + hash_ + fragment
    return f"{head}://{authority_and_path}{tail}"


def _mask_query(query: str) -> str:
    out: list[str] = []
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if eq and is_secret_name(unquote(key)):
            out.append(f"{key}={MASK}")
            continue
        plain = unquote(value)
        if "://" in plain:
            masked = mask_url(plain)
            if masked != plain:
                value = quote(masked, safe=":/@*?=&")
        out.append(f"{key}{eq}{value}")
    return "&".join(out)


def _mask_keyvalues(text: str) -> str:
    return _KEYVALUE_PASSWORD.sub(lambda m: f"{m.group(1)}={MASK}", text)


def mask_text(text: str) -> str:
    """``text`` with every URL in it masked (``mask_url``) and ``password=`` pairs hidden."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)
    if "=" in text:
        text = _mask_keyvalues(text)
    return text
