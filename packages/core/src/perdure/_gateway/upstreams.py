"""``NAME=URL`` upstreams: a request to ``/NAME/rest`` goes to ``URL/rest``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from perdure._errors import ConfigurationError

#: Upstream names: a path segment that cannot clash with the gateway's own ``/_perdure``.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"upstream name {name!r}: use letters, digits, '_', '.', '-' (not first), "
            "at most 64 characters"
        )
    return name


def check_url(name: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"upstream {name!r}: {url!r} is not an http:// or https:// URL")
    if parts.query or parts.fragment:
        raise ConfigurationError(f"upstream {name!r}: {url!r} must not have a query or fragment")
    return url.rstrip("/")


def parse_upstreams(specs: Iterable[str]) -> dict[str, str]:
    """``["pay=http://127.0.0.1:9000/v1", ...]`` → ``{"pay": "http://127.0.0.1:9000/v1"}``."""
    found: dict[str, str] = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep:
            raise ConfigurationError(f"--upstream {spec!r}: expected NAME=URL")
        name = check_name(name.strip())
        if name in found:
            raise ConfigurationError(f"--upstream {name!r} is given twice")
        found[name] = check_url(name, url.strip())
    return found
