"""Durations as people write them: ``90s``, ``30m``, ``1h``, ``2d``, ``1w``, ``1h30m``, or a
bare number of seconds. One parser for the CLI's options, the console's filters and the
``retention=`` URL option, each of which wraps its error in its own type."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ``ValueError`` saying what is wrong (a phrase to follow the
    name of the option that held ``text``)."""
    raw = text.strip().lower()
    try:
        seconds = float(raw)
    except ValueError:
        seconds = None
    if seconds is None:
        if not raw or _DURATION.sub("", raw).strip():
            raise ValueError(f"{text!r} is not a duration; use e.g. 90s, 30m, 1h, 2d or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(raw))
    if seconds < 0:
        raise ValueError(f"must not be negative (got {text!r})")
    if seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{text!r} is not a finite duration")
    return seconds
