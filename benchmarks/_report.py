"""The generated parts of ``benchmarks/RESULTS.md``, from the runs of every module."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sqlite3
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._records import Run
from benchmarks._results import target_of

PACKAGES = (
    "perdure",
    "perdure-langgraph",
    "perdure-openai-agents",
    "perdure-dbos",
    "perdure-temporal",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "openai-agents",
    "dbos",
    "temporalio",
    "psycopg",
    "psycopg-pool",
)
SECTIONS = (
    "per-step overhead",
    "LangGraph per-superstep",
    "Agents SDK per-turn",
    "Temporal",
    "DBOS",
    "recovery",
    "scale",
)


def machine(load_start: tuple[float, float, float]) -> dict[str, str]:
    """CPU, memory, OS and load average (at start, and now: the end)."""
    model = "?"
    mem = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    load_end = os.getloadavg()
    return {
        "CPU": f"{os.cpu_count()} x {model}",
        "memory": mem,
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load_start),
        "load average at end (1/5/15 min)": " / ".join(f"{x:.2f}" for x in load_end),
    }


def versions(pg_url: str) -> dict[str, str]:
    """Python, the key packages, SQLite, the PostgreSQL server and the git commit."""
    out = {"Python": sys.version.split()[0], "sqlite3 (library)": sqlite3.sqlite_version}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    try:
        import psycopg

        with psycopg.connect(pg_url, connect_timeout=5) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            sync = conn.execute("SHOW synchronous_commit").fetchone()
        server = row[0] if row else "?"
        out["PostgreSQL server"] = f"{server} (synchronous_commit={sync[0] if sync else '?'})"
    except Exception as exc:
        out["PostgreSQL server"] = f"unreachable ({type(exc).__name__})"
    try:
        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        out["git commit"] = f"{head}{' (working tree has uncommitted changes)' if dirty else ''}"
    except OSError:
        pass
    return out


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    a = abs(x)
    digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    text = f"{x:.{digits}f}"
    return f"{text} {unit}".rstrip()


def _with_spread(value: float | None, spread: list[float] | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if not spread or spread[0] == spread[1]:
        return _num(value, unit)
    return f"{_num(value, unit)} [{_num(spread[0])}-{_num(spread[1])}]"


def verdict(figure: dict[str, Any]) -> tuple[str, str]:
    """(target text, met/missed/-) for one figure."""
    target = target_of(figure)
    if target is None:
        return "-", "-"
    met = target.met(figure)
    shown = ("ratio " if target.metric == "ratio" else "") + target.text
    return shown, "-" if met is None else ("**met**" if met else "**missed**")


def headline(figures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The figures of the main table: all but the scale curves' inner points (their
    charts and table carry them)."""
    out = []
    for f in figures:
        if f["section"] == "scale":
            largest = f["figure"].startswith("scale.wall.") and f["x"] == max_x(figures, f)
            if f.get("target") or largest:
                out.append(f)
        else:
            out.append(f)
    return out


def max_x(figures: list[dict[str, Any]], like: dict[str, Any]) -> float | None:
    xs = [f["x"] for f in figures if f.get("series") == like.get("series") and f["x"] is not None]
    return max(xs) if xs else None


def _section_key(f: dict[str, Any]) -> int:
    return SECTIONS.index(f["section"]) if f["section"] in SECTIONS else len(SECTIONS)


def ratio_table(figures: list[dict[str, Any]]) -> list[str]:
    """The one table of ratios against the anchors, targets next to them."""
    lines = [
        "| section | figure | anchor | value [min-max] | anchor value | ratio [min-max] | n "
        "| DESIGN.md target | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in sorted(headline(figures), key=_section_key):
        target, met = verdict(f)
        lines.append(
            f"| {f['section']} | {f['subject']} | {f.get('anchor') or '-'} "
            f"| {_with_spread(f['value'], f['spread'], f['unit'])} "
            f"| {_with_spread(f.get('anchor_value'), f.get('anchor_spread'), f['unit'])} "
            f"| {_with_spread(f.get('ratio'), f.get('ratio_spread'), 'x')} "
            f"| {f['n']} | {target} | {met} |"
        )
    return lines


def scale_table(figures: list[dict[str, Any]]) -> list[str]:
    """The scale points, one row per (store, run count) and per (store, history)."""
    by: dict[tuple[str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    hist: dict[tuple[str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for f in figures:
        if f["section"] != "scale":
            continue
        p = f["params"]
        kind = f["figure"].split(".")[1]
        if "runs" in p:
            by[(p["store"], p["runs"])][kind] = f
        elif "history" in p:
            hist[(p["store"], p["history"])][f["figure"].split(".")[2]] = f
    lines: list[str] = []
    if by:
        lines += [
            "| store | concurrent runs | wall [min-max] | x ideal | CPU per step | peak RSS "
            "| RSS growth per run |",
            "|---|---|---|---|---|---|---|",
        ]
        for (store, runs), d in sorted(by.items()):
            wall, cpu, rss = d.get("wall"), d.get("cpu"), d.get("rss")
            lines.append(
                f"| {store} | {runs:,} "
                f"| {_with_spread(wall['value'], wall['spread'], 'ms') if wall else '-'} "
                f"| {_num(wall['ratio'], 'x') if wall else '-'} "
                f"| {_num(cpu['value'], 'µs') if cpu else '-'} "
                f"| {_num(rss['value'], 'MB') if rss else '-'} "
                f"| {_num(rss['params'].get('kb_per_run'), 'KB') if rss else '-'} |"
            )
        lines.append("")
    if hist:
        lines += [
            "| store | steps in the run | mean per step | per step over the last 10 % |",
            "|---|---|---|---|",
        ]
        for (store, n), d in sorted(hist.items()):
            mean, tail = d.get("mean"), d.get("tail")
            lines.append(
                f"| {store} | {n:,} | {_num(mean['value'], 'µs') if mean else '-'} "
                f"| {_num(tail['value'], 'µs') if tail else '-'} |"
            )
    return lines


@dataclass
class Sitting:
    """One ``python -m benchmarks`` invocation: when, how long, where, and which modules it
    ran (the report also shows the other modules' last runs)."""

    started: str
    total: float
    quick: bool
    ran: list[str]
    machine_info: dict[str, str]
    version_info: dict[str, str]


def _earlier(run: Run, sitting: Sitting) -> bool:
    return run.figures_from != sitting.started


def shown_figures(runs: list[Run], sitting: Sitting) -> list[dict[str, Any]]:
    """Every run's figures, those measured in an earlier sitting saying when."""
    out = []
    for r in runs:
        for f in r.figures:
            if _earlier(r, sitting):
                f = {**f, "subject": f"{f['subject']} (run {r.figures_from})"}
            out.append(f)
    return out


def _header(sitting: Sitting, runs: list[Run]) -> list[str]:
    ran = ", ".join(sitting.ran) or "none"
    earlier = [f"{r.name} ({r.figures_from})" for r in runs if _earlier(r, sitting)]
    carried = (
        "Every figure below comes from this one run, on this machine; nothing is carried over."
        if not earlier
        else f"This sitting ran {ran}; the figures of "
        + ", ".join(earlier)
        + " are those modules' last runs, marked with their date in the tables."
    )
    lines = [
        "# perdure benchmarks",
        "",
        "Generated by `python -m benchmarks"
        + (" --quick" if sitting.quick else "")
        + f"` (`nox -s bench`), started {sitting.started}, {sitting.total / 60:.1f} min in "
        f"all. {carried}",
        "",
    ]
    if sitting.quick or any(r.quick for r in runs):
        lines += [
            "> **Quick mode**: small counts for smoke testing. Medians over so few repeats "
            "are noisy; do not quote these figures.",
            "",
        ]
    return lines


def summary(runs: list[Run], sitting: Sitting) -> str:
    """The generated part from the title to the table of ratios."""
    lines = _header(sitting, runs)
    lines += ["## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in sitting.machine_info.items()]
    lines += ["", "## Versions", ""]
    lines += [f"- {k}: {v}" for k, v in sitting.version_info.items()]
    lines += [
        "",
        "## Benchmarks run",
        "",
        "| benchmark | command | started | elapsed | exit |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        rc = "-" if r.returncode is None else str(r.returncode)
        notes = [n for n in (r.note, "quick" if r.quick else "") if n]
        note = f" ({'; '.join(notes)})" if notes else ""
        lines.append(
            f"| {r.name} | `{' '.join(r.argv)}` | {r.started} | {r.elapsed:.0f} s | {rc}{note} |"
        )
    lines += [
        "",
        "## Ratios against the anchors",
        "",
        "value and anchor value: medians over the repeats, [min-max] across them; ratio: "
        "the median of the round-by-round ratios (subject and anchor measured in the same "
        "round, interleaved), [min-max] across rounds. A ratio below 1 means perdure costs "
        "less than the anchor. The verdict compares the median with the target.",
        "",
        *ratio_table(shown_figures(runs, sitting)),
    ]
    return "\n".join(lines)


def listed_modules(summary_text: str) -> list[str]:
    """The modules the table "Benchmarks run" of a summary part lists."""
    names: list[str] = []
    rows = summary_text.split("## Benchmarks run", 1)[-1].split("\n\n## ", 1)[0]
    for line in rows.splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1] not in ("benchmark", "") and set(cells[1]) != {"-"}:
            names.append(cells[1])
    return names


def details(
    runs: list[Run], sitting: Sitting, chart_paths: list[tuple[str, Path]], report_dir: Path
) -> str:
    """The generated part from the scale tables to the raw output."""
    figures = shown_figures(runs, sitting)
    lines = ["## Scale", "", *scale_table(figures), ""]
    for title, path in chart_paths:
        lines += [f"![{title}]({os.path.relpath(path, report_dir)})", ""]
    lines += ["## Settings of each figure", "", "| figure | settings |", "|---|---|"]
    for f in sorted(figures, key=_section_key):
        if f["section"] == "scale" and f not in headline(figures):
            continue
        lines.append(f"| `{f['figure']}` | {f['settings'] or '-'} |")
    lines += [
        "",
        "Notes on reading the targets:",
        "",
        "- per-step: *at least 10x less per step than DBOS on SQLite* is ratio ≤ 0.1 of "
        "perdure embedded over plain DBOS on SQLite, judged both at perdure's default "
        "(synchronous=NORMAL) and at DBOS's durability (synchronous=FULL); "
        "*within 1.3x of a bare insert+commit* is ratio ≤ 1.3 on PostgreSQL.",
        "- LangGraph: ratios of the per-superstep overheads over a run without "
        "checkpointer, at equal durability settings; rows marked *unequal* have no verdict.",
        "- recovery: the target applies to the in-process worker (`serve()`), which is "
        "where a worker starts; the `perdure worker` and SIGKILL rows include spawning a "
        "Python interpreter and importing, the same for both columns.",
        "- replay: the 1,000-step-history row of the in-process recovery: the worker loads "
        "and replays the 1,000 recorded steps before the first new step runs.",
        "- concurrency: *near the ideal* is read as wall time ≤ 1.5x the ideal at 1,000 runs.",
        "",
        "## Raw output",
        "",
    ]
    for r in (r for r in runs if r.output.strip()):
        lines += [
            "<details>",
            f"<summary>{r.name}</summary>",
            "",
            "```text",
            r.output.rstrip(),
            "```",
            "",
            "</details>",
            "",
        ]
    return "\n".join(lines)
