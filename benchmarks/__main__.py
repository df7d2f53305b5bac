"""``python -m benchmarks [--quick] [--only NAME ...]`` (``nox -s bench``): every benchmark
in one sitting, each in its own subprocess writing JSON figures, then one report:
``benchmarks/RESULTS.md`` with charts under ``benchmarks/results/``.

Any module ``benchmarks/temporal*.py`` is run too (``--json results/<module>.json``;
``PERDURE_BENCH_QUICK=1`` in quick mode), and every ``benchmarks/results/temporal*.json``
(same schema, see ``benchmarks/_results.py``) joins the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import _report

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
RESULTS = HERE / "results"
REPORT = HERE / "RESULTS.md"
PG_URL = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Bench:
    """One benchmark script: its arguments in full and quick mode, and its time budget
    (seconds, full mode; it is killed at twice that)."""

    name: str
    target: list[str]
    full: list[str]
    quick: list[str]
    budget: float


BENCHMARKS = (
    Bench(
        "engine_steps",
        ["-m", "benchmarks.engine_steps"],
        ["--steps", "1000", "--repeat", "5"],
        ["--steps", "100", "--repeat", "1"],
        180,
    ),
    Bench(
        "dbos_steps",
        ["-m", "benchmarks.dbos_steps"],
        ["--steps", "300", "--repeat", "5", "--kill-repeat", "5"],
        ["--steps", "50", "--repeat", "1", "--kill-repeat", "1"],
        240,
    ),
    Bench(
        "agents_turns",
        ["-m", "benchmarks.agents_turns"],
        ["--repeat", "20"],
        ["--repeat", "2"],
        60,
    ),
    Bench(
        "langgraph_superstep",
        [str(HERE / "langgraph_superstep.py")],
        ["--reps", "40", "--warmup", "3"],
        ["--reps", "3", "--warmup", "1"],
        90,
    ),
    Bench(
        "gateway_overhead",
        ["-m", "benchmarks.gateway_overhead"],
        ["--calls", "300", "--repeat", "5"],
        ["--calls", "30", "--repeat", "1"],
        120,
    ),
    Bench(
        "scale",
        ["-m", "benchmarks.scale"],
        ["--runs", "10,100,1000,10000", "--histories", "10,100,1000,10000", "--repeat", "3"],
        ["--runs", "10,100,1000", "--histories", "10,100,1000", "--repeat", "1"],
        300,
    ),
)


def temporal_benches() -> list[Bench]:
    """``benchmarks/temporal*.py`` modules, if another engineer added any."""
    return [
        Bench(p.stem, ["-m", f"benchmarks.{p.stem}"], [], [], 240)
        for p in sorted(HERE.glob("temporal*.py"))
    ]


def run_one(bench: Bench, quick: bool) -> _report.Run:
    """Run one benchmark in a subprocess, echoing and keeping its output."""
    out = RESULTS / f"{bench.name}.json"
    argv = [*bench.target, *(bench.quick if quick else bench.full), "--json", str(out)]
    shown = ["python", *(a.replace(str(ROOT) + "/", "") for a in argv)]
    shown = [a.replace(str(ROOT) + "/", "") for a in shown]
    run = _report.Run(bench.name, shown)
    print(f"\n=== {bench.name}: {' '.join(shown)}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    if quick:
        env["PERDURE_BENCH_QUICK"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends all of it
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    limit = 2 * bench.budget
    try:
        run.returncode = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        run.returncode = proc.returncode
        run.note = f"killed after {limit:.0f} s"
    reader.join(timeout=5)
    run.elapsed = time.perf_counter() - t0
    run.output = "".join(lines)
    if out.exists():
        run.figures = json.loads(out.read_text(encoding="utf-8"))
    over = "" if quick or run.elapsed <= bench.budget else f", OVER its {bench.budget:.0f} s budget"
    print(
        f"=== {bench.name}: {run.elapsed:.1f} s, exit {run.returncode}, "
        f"{len(run.figures)} figures{over}",
        flush=True,
    )
    return run


def temporal_figures(since: float) -> tuple[list[_report.Run], str]:
    """Runs standing for each ``results/temporal*.json`` a benchmark did not write in
    this sitting, and the Temporal line of the report."""
    files = sorted(RESULTS.glob("temporal*.json"))
    if not files:
        return [], "not measured in this run"
    runs = []
    notes = []
    for path in files:
        when = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        stale = path.stat().st_mtime < since
        figures = json.loads(path.read_text(encoding="utf-8"))
        run = _report.Run(path.stem, [f"(file {path.relative_to(ROOT)})"], figures=figures)
        for f in figures:
            f.setdefault("section", "Temporal")
            if stale:
                f["subject"] = f"{f['subject']} (from an earlier run, {when:%Y-%m-%d %H:%M} UTC)"
        run.note = "earlier run: not from this sitting" if stale else "written in this sitting"
        notes.append(f"`{path.name}` ({run.note}, {len(figures)} figures)")
        runs.append(run)
    return runs, "figures from " + ", ".join(notes) + " (in the table above)."


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, write RESULTS.md; nonzero if any benchmark failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for smoke tests")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks (by name)")
    ns = parser.parse_args(argv)
    benches = [*BENCHMARKS, *temporal_benches()]
    if ns.only:
        benches = [b for b in benches if b.name in ns.only]
    load_start = os.getloadavg()
    started = datetime.now(UTC)
    since = time.time()
    RESULTS.mkdir(parents=True, exist_ok=True)
    for stale in [*RESULTS.glob("*.json"), *RESULTS.glob("*.png")]:
        if not stale.name.startswith("temporal"):
            stale.unlink()
    t0 = time.perf_counter()
    runs = [run_one(b, ns.quick) for b in benches]
    ran = {r.name for r in runs}
    extra, temporal_note = temporal_figures(since)
    runs += [r for r in extra if r.name not in ran]
    figures = [f for r in runs for f in r.figures]
    chart_paths = _report.charts(figures, RESULTS)
    total = time.perf_counter() - t0
    text = _report.render(
        runs,
        quick=ns.quick,
        started=f"{started:%Y-%m-%d %H:%M} UTC",
        total=total,
        machine_info=_report.machine(load_start),
        version_info=_report.versions(PG_URL),
        chart_paths=chart_paths,
        temporal_note=temporal_note,
        report_dir=HERE,
    )
    REPORT.write_text(text + "\n", encoding="utf-8")
    print(f"\nTemporal: {temporal_note}")
    print("\nelapsed per benchmark:")
    for r in runs:
        if r.returncode is not None:
            print(f"  {r.name:22} {r.elapsed:7.1f} s  exit {r.returncode}")
    print(f"  {'total':22} {total:7.1f} s")
    print(
        f"wrote {REPORT.relative_to(ROOT)} and {len(chart_paths)} charts in "
        f"{RESULTS.relative_to(ROOT)}/"
    )
    return 1 if any(r.returncode for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
