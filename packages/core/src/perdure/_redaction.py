"""Secrets out of history: the redaction policy applied to everything perdure records.

Before a value is recorded (run input, step results, signal payloads, wait details,
parked effects' arguments, error messages), the policy replaces:

* the value of every dict key named like a secret — ``password``, ``secret``,
  ``token``, ``api_key``, ``authorization``, ``cookie``/``set-cookie``, ``session_token``,
  ``private_key``, ``credentials`` and names ending so (``db_password``,
  ``stripe_api_key``) — with the marker ``"[redacted:key]"``;
* secrets inside strings — ``Bearer``/``Basic`` credentials, ``Authorization:``/
  ``Cookie:`` header values, URL passwords and ``password=`` pairs, and well-known
  API-key shapes (``sk-...``, ``ghp_...``, ``xox?-...``, ``AKIA...``) — with
  ``[redacted:<rule>]`` in place of the secret;
* whatever the user's rules match: extra key names and text patterns, added with
  ``redact_keys``/``redact_pattern`` or configured like the URL
  (``PERDURE_REDACT_KEYS``, ``[tool.perdure] redact_keys``, comma-separated or a list).
  ``allow_keys`` (``PERDURE_REDACT_ALLOW_KEYS``, ``redact_allow_keys``) exempts keys a
  default rule catches by mistake.

A redacted value is marked, never dropped, and what is recorded is what every replay
returns: a step whose result was redacted hands the workflow the recorded (redacted)
value on its first run too, so a run behaves the same before and after a crash. A
workflow that needs a secret across steps keeps it out of recorded values (fetch it
inside the step that uses it) or turns on encryption at rest instead.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from perdure import _masking as masking
from perdure._config import setting

__all__ = ["allow_keys", "redact", "redact_keys", "redact_pattern", "redact_text"]

_KEY = re.compile(
    # Not ``session_id``: it names an agent's conversation, which a worker needs back.
    r"(?:^|[_-])(?:set[_-]?cookie|cookies?|session[_-]?(?:token|key)|bearer)$",
    re.IGNORECASE,
)
#: (rule name, pattern, the group kept before the secret).
_TEXT_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("bearer", re.compile(r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9\-._~+/]{6,}=*")),
    (
        "header",
        re.compile(
            r"(?i)(\b(?:proxy-)?(?:authorization|cookie|set-cookie|x-api-key)\s*[:=]\s*)"
            r"(?!\[redacted)[^\r\n\"'}]+"
        ),
    ),
    ("api-key", re.compile(r"()\b(?:sk|rk|pk)-[A-Za-z0-9_\-]{16,}")),
    ("api-key", re.compile(r"()\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}")),
    ("api-key", re.compile(r"()\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("api-key", re.compile(r"()\bAKIA[0-9A-Z]{16}\b")),
]
_user_keys: set[str] = set()
_allowed_keys: set[str] = set()
_user_patterns: list[tuple[str, re.Pattern[str]]] = []


def redact_keys(*names: str) -> None:
    """Also redact the values of dict keys with these names (case-insensitive)."""
    _user_keys.update(n.strip().lower() for n in names if n.strip())


def allow_keys(*names: str) -> None:
    """Never redact the values of dict keys with these names (a default rule's false
    positive, e.g. a model's logprobs ``token``); also ``PERDURE_REDACT_ALLOW_KEYS``."""
    _allowed_keys.update(n.strip().lower() for n in names if n.strip())


def redact_pattern(pattern: str, name: str = "custom") -> None:
    """Also redact every match of the regular expression ``pattern`` inside strings."""
    _user_patterns.append((name, re.compile(f"(){pattern}")))


def _configured(name: str, env: str) -> frozenset[str]:
    return _read_keys(name, env, os.environ.get(env), os.getcwd())


@functools.cache
def _read_keys(name: str, env: str, value: str | None, cwd: str) -> frozenset[str]:
    """Cached per (environment value, folder): reading pyproject.toml on every recorded
    value would cost a file read per step."""
    del value  # part of the cache key only; ``setting`` reads it again
    raw: Any = setting(name, env, cwd=Path(cwd))
    items: Iterable[Any] = ()
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list):
        items = cast(list[Any], raw)
    return frozenset(str(i).strip().lower() for i in items if str(i).strip())


def _secret_key(key: str, extra: frozenset[str], allowed: frozenset[str]) -> bool:
    lowered = key.lower()
    if lowered in allowed:
        return False
    return masking.is_secret_name(key) or bool(_KEY.search(key)) or lowered in extra


def redact_text(text: str, hits: list[str] | None = None) -> str:
    """``text`` with every secret in it replaced by ``[redacted:<rule>]``."""
    out = masking.mask_text(text)
    if hits is not None and out != text:
        hits.append("url")
    for name, pattern in (*_TEXT_RULES, *_user_patterns):
        out, count = pattern.subn(lambda m, n=name: f"{m.group(1)}[redacted:{n}]", out)
        if count and hits is not None:
            hits.append(name)
    return out


def redact(data: Any, hits: list[str] | None = None) -> Any:
    """JSON data with the policy applied (a new value; ``data`` is left as it is).
    The names of the rules that matched are appended to ``hits``."""
    extra = _configured("redact_keys", "PERDURE_REDACT_KEYS") | _user_keys
    allowed = _configured("redact_allow_keys", "PERDURE_REDACT_ALLOW_KEYS") | _allowed_keys
    return _redact(data, extra, allowed, hits)


def _redact(
    data: Any, extra: frozenset[str], allowed: frozenset[str], hits: list[str] | None
) -> Any:
    if isinstance(data, str):
        return redact_text(data, hits)
    if isinstance(data, list):
        return [_redact(v, extra, allowed, hits) for v in cast(list[Any], data)]
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in cast(dict[str, Any], data).items():
            secret = _secret_key(key, extra, allowed)
            if secret and value is not None and not _is_marker(value):
                out[key] = "[redacted:key]"
                if hits is not None:
                    hits.append("key")
            else:
                out[key] = _redact(value, extra, allowed, hits)
        return out
    return data


def _is_marker(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("[redacted:")
