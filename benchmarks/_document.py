"""The generated parts of ``benchmarks/RESULTS.md``, each between its own two markers.

The harness rewrites only what lies between ``<!-- benchmarks:NAME begin ... -->`` and
``<!-- benchmarks:NAME end -->``; everything outside (the sections engineers write by hand
about benchmarks run on their own) is kept byte for byte, wherever it stands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_MARKER = re.compile(r"^<!-- benchmarks:(?P<name>[a-z_]+) (?P<edge>begin|end)\b.*-->$", re.M)


class MarkerError(ValueError):
    """A generated part's markers are missing one edge, repeated or out of order."""


def begin(name: str) -> str:
    """The line opening the generated part ``name``."""
    return (
        f"<!-- benchmarks:{name} begin: written by `python -m benchmarks`; "
        "edit outside these markers -->"
    )


def end(name: str) -> str:
    """The line closing the generated part ``name``."""
    return f"<!-- benchmarks:{name} end -->"


def spans(text: str, where: str) -> dict[str, tuple[int, int]]:
    """Where each generated part's content starts and ends in ``text`` (between the
    markers' lines); ``where`` names the document in errors."""
    opened: dict[str, int] = {}
    out: dict[str, tuple[int, int]] = {}
    for m in _MARKER.finditer(text):
        name, edge = m["name"], m["edge"]
        line = text.count("\n", 0, m.start()) + 1
        if edge == "begin":
            if name in opened or name in out:
                raise MarkerError(f"{where}:{line}: second 'begin' of generated part {name!r}")
            opened[name] = m.end() + 1
        else:
            if name not in opened:
                raise MarkerError(f"{where}:{line}: 'end' of {name!r} without its 'begin'")
            out[name] = (opened.pop(name), m.start())
    if opened:
        raise MarkerError(f"{where}: generated part(s) {sorted(opened)} have no 'end' marker")
    return out


def content(text: str, name: str, where: str) -> str | None:
    """The current content of the generated part ``name``, None if it has none."""
    span = spans(text, where).get(name)
    return None if span is None else text[span[0] : span[1]]


def splice(text: str, parts: Mapping[str, str], where: str) -> str:
    """``text`` with each generated part replaced by ``parts[name]``; a part not yet in
    ``text`` is appended at its end, markers included. Nothing else changes."""
    found = spans(text, where)
    if not found and text.strip():
        raise MarkerError(
            f"{where}: no generated-part markers, so every line of it counts as written by "
            f"hand; put {begin('NAME')!r} / {end('NAME')!r} around the generated sections"
        )
    for name, (start, stop) in sorted(found.items(), key=lambda kv: -kv[1][0]):
        if name in parts:
            text = text[:start] + parts[name].rstrip("\n") + "\n" + text[stop:]
    for name, body in parts.items():
        if name not in found:
            gap = (
                "" if not text or text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"
            )
            text += f"{gap}{begin(name)}\n{body.rstrip(chr(10))}\n{end(name)}\n"
    return text
