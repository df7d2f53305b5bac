"""Options of a backend URL that are perdure's own, not the substrate's.

``retention=`` (``sqlite:///runs.db?retention=30d``) says how long ``perdure worker``
keeps finished runs before it prunes them. Such options are taken off the URL before a
backend or an adapter's SQL state sees it (``registry.open_backend``,
``registry.state_url``): a substrate never meets an option it does not know, and libpq
is never handed one. Everything else in the query stays exactly as written.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

from perdure._durations import parse_duration
from perdure._errors import ConfigurationError, RetentionError
from perdure._masking import mask_url

__all__ = ["OPTIONS", "backend_url", "perdure_options", "retention"]

OPTIONS = ("retention",)


def _split(url: str) -> tuple[str, dict[str, str]]:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigurationError(f"malformed backend URL {mask_url(url)!r}: {exc}") from exc
    if not parts.query:
        return url, {}
    kept: list[str] = []
    ours: dict[str, str] = {}
    # Raw pieces, not parse_qsl + urlencode: the substrate's own options (a nested URL in
    # Temporal's state=, libpq's) reach it byte for byte.
    for piece in parts.query.split("&"):
        key, _, value = piece.partition("=")
        name = unquote_plus(key)
        if name in OPTIONS:
            ours[name] = unquote_plus(value)
        else:
            kept.append(piece)
    if not ours:
        return url, {}
    # Cut the string, not urlunsplit: that turns sqlite:////abs.db into sqlite://abs.db.
    head = url.partition("?")[0]
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    query = "&".join(kept)
    return head + (f"?{query}" if query else "") + fragment, ours


def backend_url(url: str) -> str:
    """``url`` without perdure's own options: what the backend is opened with."""
    return _split(url)[0]


def perdure_options(url: str) -> dict[str, str]:
    """perdure's own options in ``url`` (the last one wins when repeated)."""
    return _split(url)[1]


def retention(url: str) -> float | None:
    """Seconds of ``retention=`` in ``url``, None without it; ``RetentionError`` for a
    value that is not a duration (``0s`` keeps no finished run, as ``--retention 0s``)."""
    raw = perdure_options(url).get("retention")
    if raw is None:
        return None
    try:
        seconds = parse_duration(raw)
    except ValueError as exc:
        raise RetentionError(f"retention= in {mask_url(url)!r}: {exc}") from None
    return seconds
