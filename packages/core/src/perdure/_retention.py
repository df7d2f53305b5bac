"""Retention: export, then delete, runs that finished long ago.

``prune`` lists the finished runs not updated for ``older_than`` seconds, optionally
writes each one's history as JSON Lines (the format of ``perdure runs export``) into a
folder, and then deletes them through ``Backend.delete_finished``: a run is deleted
only after its export is on disk.

Packages that keep more per run (a framework's checkpoints or sessions, payloads stored
aside) register a purge under the entry-point group ``perdure.retention``::

    [project.entry-points."perdure.retention"]
    langgraph = "perdure_langgraph._retention:purge"

    async def purge(backend: Backend, runs: Sequence[RunInfo]) -> None: ...

called for each batch with the records of the finished runs about to be deleted (after
their export), before ``delete_finished``. A purge deletes what it keeps for those runs
and ignores runs that are not its own. Before, not after: if a purge raises, the batch's
runs are not deleted and the next prune retries them, so no adapter state outlives its
run unnoticed; hence a purge must be idempotent (called again for runs whose state it
already removed).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perdure import _url_options as url_options
from perdure._backend import Backend
from perdure._config import setting
from perdure._durations import parse_duration
from perdure._errors import ConfigurationError, RetentionError
from perdure._records import Event, RunInfo, RunStatus
from perdure._revealed import revealed_events, revealed_run

FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
#: Runs one prune reads at most (a worker's retention comes back for the rest).
MAX_RUNS = 100_000
BATCH = 200

Purge = Callable[[Backend, Sequence[RunInfo]], Awaitable[None]]
Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True, slots=True)
class PruneReport:
    matched: int
    deleted: int
    exported: int
    export_dir: Path | None


def configured(url: str) -> float | None:
    """How long finished runs are kept when no ``--retention`` says: ``retention=`` in
    the backend URL, else ``retention`` in ``[tool.perdure]`` (``"30d"``), else forever
    (None). A value that is not a duration is a ``RetentionError`` naming where it is."""
    from_url = url_options.retention(url)
    if from_url is not None:
        return from_url
    raw = setting("retention", "PERDURE_RETENTION")
    if raw is None:
        return None
    try:
        if not isinstance(raw, str | int | float) or isinstance(raw, bool):
            raise ValueError(f'{raw!r} is not a duration; use e.g. "30d"')
        return parse_duration(str(raw))
    except ValueError as exc:
        raise RetentionError(f"[tool.perdure] retention (or $PERDURE_RETENTION): {exc}") from None


def export_lines(info: RunInfo, events: Sequence[Event]) -> list[str]:
    """A run as JSON Lines: ``{"run": ...}`` first, then one event per line."""
    dump = json.dumps
    return [
        dump({"run": info.to_json()}, ensure_ascii=False, default=str),
        *(dump(ev.to_json(), ensure_ascii=False, default=str) for ev in events),
    ]


def export_name(run_id: str) -> str:
    """A file name for ``run_id``: the id itself when it is safe, else a safe form of it
    plus a hash (two ids never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:120]
    if safe == run_id and not run_id.startswith("."):
        return f"{run_id}.jsonl"
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return f"{safe}-{digest}.jsonl"


def _purges() -> list[Purge]:
    found: list[Purge] = []
    for ep in importlib.metadata.entry_points(group="perdure.retention"):
        try:
            found.append(ep.load())
        except ImportError as exc:
            raise ConfigurationError(
                f"the retention hook {ep.name!r} ({ep.value}) cannot be imported: {exc}; "
                "nothing was deleted"
            ) from exc
    return found


async def _export(backend: Backend, info: RunInfo, folder: Path) -> None:
    events = revealed_events(await backend.history(info.run_id))
    await asyncio.to_thread(_write_export, folder, revealed_run(info), events)


def _write_export(folder: Path, info: RunInfo, events: Sequence[Event]) -> None:
    """Write, flush to disk, then rename: a deleted run's export is complete."""
    target = folder / export_name(info.run_id)
    partial = target.with_suffix(".jsonl.partial")
    with partial.open("w", encoding="utf-8") as fh:
        for line in export_lines(info, events):
            fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    partial.replace(target)


async def prune(
    backend: Backend,
    *,
    older_than: float,
    statuses: Sequence[RunStatus] = FINISHED,
    export_dir: Path | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> PruneReport:
    """Delete finished runs not updated for ``older_than`` seconds (after exporting them
    to ``export_dir``, when given)."""
    unfinished = [s.value for s in statuses if not s.terminal]
    if unfinished:
        raise ConfigurationError(
            f"prune deletes finished runs only; {', '.join(unfinished)} is not finished"
        )
    if older_than < 0:
        raise ConfigurationError(f"older_than must not be negative (got {older_than})")
    runs = await backend.list_runs(statuses=statuses, older_than=older_than, limit=MAX_RUNS)
    if dry_run or not runs:
        return PruneReport(len(runs), 0, 0, export_dir)
    if type(backend).delete_finished is Backend.delete_finished:
        # Before any purge: adapter state must not go while its runs stay.
        await backend.delete_finished([])  # raises the backend's "cannot delete runs yet"
    if export_dir is not None:
        try:
            await asyncio.to_thread(export_dir.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"export folder {str(export_dir)!r}: {exc.strerror}") from exc
    purges = _purges()
    deleted = exported = 0
    for start in range(0, len(runs), BATCH):
        batch = runs[start : start + BATCH]
        if export_dir is not None:
            for info in batch:
                await _export(backend, info, export_dir)
                exported += 1
        for purge in purges:
            await purge(backend, batch)
        gone = await backend.delete_finished([info.run_id for info in batch])
        deleted += len(gone)
        if progress is not None:
            progress(start + len(batch), len(runs))
    return PruneReport(len(runs), deleted, exported, export_dir)
