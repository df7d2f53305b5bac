"""The fixed-width tables a benchmark prints (RESULTS.md's raw output shows them as
printed): one function, so every module lays its columns out the same way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def print_table(
    title: str,
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    widths: Sequence[int],
    align: str = "",
) -> None:
    """Print a blank line, ``title``, then ``head`` and each of ``rows``, indented by two
    spaces, cells one space apart, each padded to its column's width. ``align`` holds one
    ``<`` (left) or ``>`` (right) per column; by default the first column is left-aligned
    and the others right-aligned. A row shorter than ``head`` leaves its last columns empty;
    a cell wider than its column pushes the rest of its row right."""
    align = align or "<" + ">" * (len(widths) - 1)
    print(f"\n{title}")
    for cells in (head, *rows):
        text = " ".join(
            f"{cell:{side}{width}}" for cell, side, width in zip(cells, align, widths, strict=False)
        )
        print(f"  {text.rstrip()}")
