"""Splitting a configured URL: a typed error, with the password masked, for one that
``urllib`` cannot split (an unbalanced ``[`` in the host, a bad port), never a bare
``ValueError``. Every URL parser of perdure and its backends splits through here."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from perdure._errors import ConfigurationError
from perdure._masking import mask_url

__all__ = ["split_url"]


def split_url(url: str) -> SplitResult:
    """``urlsplit(url)``, or ``ConfigurationError`` naming the URL with no password."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ConfigurationError(f"{mask_url(url)!r} is not a valid URL: {exc}") from None
    return parts
