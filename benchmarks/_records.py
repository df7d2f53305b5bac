"""What each benchmark module's last run left: ``benchmarks/results/<name>.record.json``.

The report is rendered from every module's record, so a run of some modules (``--only``)
replaces their figures and keeps the others' as the sitting that measured them left them.
A module run on its own (``python -m benchmarks.X --json results/X.json``) leaves only its
figures file; when that file is newer than the record, its figures stand for the module.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def stamp(when: datetime) -> str:
    """The UTC second a sitting started, as the report shows it."""
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


@dataclass
class Run:
    """One benchmark module's run: how it was run, what it printed, the figures it wrote,
    and ``figures_from``: the start of the sitting that measured those figures (an earlier
    one when this run wrote none)."""

    name: str
    argv: list[str]
    started: str = ""
    elapsed: float = 0.0
    returncode: int | None = None
    output: str = ""
    figures: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    quick: bool = False
    figures_from: str = ""


def record_path(results: Path, name: str) -> Path:
    """Where the record of module ``name`` lives."""
    return results / f"{name}.record.json"


def figures_path(results: Path, name: str) -> Path:
    """Where module ``name`` writes its figures (``--json``)."""
    return results / f"{name}.json"


def save(results: Path, run: Run) -> None:
    """Keep ``run`` as module ``run.name``'s record."""
    text = json.dumps(asdict(run), indent=1, ensure_ascii=False) + "\n"
    record_path(results, run.name).write_text(text, encoding="utf-8")


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not the JSON a benchmark run writes ({exc})") from exc


def _from_record(path: Path) -> Run:
    raw = _read(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("figures"), list):
        raise ValueError(f"{path}: a benchmark record is an object with a 'figures' list")
    known = set(Run.__dataclass_fields__)
    return Run(**{k: v for k, v in raw.items() if k in known})


def _from_figures_file(path: Path, name: str) -> Run:
    figures = _read(path)
    if not isinstance(figures, list):
        raise ValueError(f"{path}: a figures file is a JSON list of figures")
    when = stamp(datetime.fromtimestamp(path.stat().st_mtime, UTC))
    return Run(
        name,
        [f"(file {path.name}, run on its own)"],
        started=when,
        figures=figures,
        figures_from=when,
    )


def load(results: Path, name: str) -> Run | None:
    """Module ``name``'s last run, None if it left nothing."""
    record, solo = record_path(results, name), figures_path(results, name)
    if solo.exists() and (not record.exists() or solo.stat().st_mtime > record.stat().st_mtime):
        return _from_figures_file(solo, name)
    return _from_record(record) if record.exists() else None
