"""Machine-readable benchmark figures: what each script writes with ``--json PATH``.

One figure is one measured quantity (``subject``), optionally next to the ``anchor`` it is
compared with. Both are lists of samples, one per repeat; when the two were measured
in the same round (interleaved), the ratio is taken round by round (``paired``), which
is robust to machine load drifting between rounds. The JSON schema, one object per
figure::

    {"figure": id, "section": str, "subject": str, "anchor": str | null,
     "unit": str, "value": median, "spread": [min, max], "n": repeats,
     "anchor_value": median | null, "anchor_spread": [min, max] | null,
     "ratio": median ratio | null, "ratio_spread": [min, max] | null,
     "settings": str, "target": {"metric": "ratio" | "value", "max": float,
     "text": str} | null, "series": str | null, "x": float | null, "params": {...}}
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Target:
    """A DESIGN.md target: ``metric`` (the ratio or the value) at most ``max``."""

    metric: str
    max: float
    text: str

    def met(self, figure: dict[str, Any]) -> bool | None:
        """True/False when the figure carries the metric, None when it does not."""
        got = figure.get(self.metric)
        if got is None or (isinstance(got, float) and math.isnan(got)):
            return None
        return bool(got <= self.max)


def _spread(xs: Sequence[float]) -> list[float] | None:
    return [min(xs), max(xs)] if xs else None


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


@dataclass
class Figure:
    """One figure; ``samples`` and ``anchor_samples`` are in ``unit``, one per repeat."""

    figure: str
    section: str
    subject: str
    unit: str
    samples: list[float]
    anchor: str | None = None
    anchor_samples: list[float] | None = None
    paired: bool = True
    settings: str = ""
    target: Target | None = None
    series: str | None = None
    x: float | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def ratios(self) -> list[float]:
        """Round-by-round ratios when paired, else the one ratio of the medians."""
        if not self.anchor_samples or not self.samples:
            return []
        if self.paired and len(self.samples) == len(self.anchor_samples):
            return [a / b for a, b in zip(self.samples, self.anchor_samples, strict=True) if b]
        anchor = statistics.median(self.anchor_samples)
        return [statistics.median(self.samples) / anchor] if anchor else []

    def to_json(self) -> dict[str, Any]:
        """The schema in the module docstring."""
        ratios = self.ratios()
        return {
            "figure": self.figure,
            "section": self.section,
            "subject": self.subject,
            "anchor": self.anchor,
            "unit": self.unit,
            "value": _median(self.samples),
            "spread": _spread(self.samples),
            "n": len(self.samples),
            "anchor_value": _median(self.anchor_samples or []),
            "anchor_spread": _spread(self.anchor_samples or []),
            "ratio": _median(ratios),
            "ratio_spread": _spread(ratios) if len(ratios) > 1 else None,
            "settings": self.settings,
            "target": None if self.target is None else vars(self.target),
            "series": self.series,
            "x": self.x,
            "params": self.params,
        }


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """``--json PATH``: also write the figures there."""
    parser.add_argument("--json", type=Path, default=None, help="write figures as JSON here")


def write_json(path: Path | None, figures: Sequence[Figure]) -> None:
    """Write ``figures`` to ``path`` (nothing when ``path`` is None)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    data = [f.to_json() for f in figures]
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def target_of(figure: dict[str, Any]) -> Target | None:
    """The target a JSON figure carries, if any."""
    raw = figure.get("target")
    return None if not raw else Target(str(raw["metric"]), float(raw["max"]), str(raw["text"]))
