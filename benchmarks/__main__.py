"""``python -m benchmarks [--quick] [--only NAME ...]`` (``nox -s bench``): the benchmarks
in one sitting, each in its own subprocess writing JSON figures, then the report:
``benchmarks/RESULTS.md`` with charts under ``benchmarks/results/``.

Every run leaves its module's record (``results/<module>.record.json``, see
``benchmarks/_records.py``), and the report is rendered from all the records, so
``--only X`` replaces X's figures and charts and keeps every other module's. Only the
generated parts of RESULTS.md (between ``<!-- benchmarks:... -->`` markers, see
``benchmarks/_document.py``) are rewritten; sections written by hand outside them stay.

The Temporal benchmarks run as one, ``benchmarks/temporal_all.py`` (``--json
results/temporal_all.json``; ``PERDURE_BENCH_QUICK=1`` in quick mode). Each module
declares its time budget (``BENCH_BUDGET_SECONDS``, see ``benchmarks/_budget.py``).
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import _budget, _charts, _document, _records, _report
from benchmarks._records import Run

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
PG_URL = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
PARTS = ("summary", "details")


@dataclass
class Bench:
    """One benchmark script: how to start it, its arguments in full and quick mode, and
    its source, which declares its time budget."""

    name: str
    target: list[str]
    full: list[str]
    quick: list[str]
    source: Path

    @property
    def budget(self) -> float:
        """Seconds a full run may take (it is killed at twice that)."""
        return _budget.declared(self.source)


def module(name: str, full: list[str] | None = None, quick: list[str] | None = None) -> Bench:
    """The benchmark ``benchmarks/<name>.py``, run with ``python -m``."""
    return Bench(name, ["-m", f"benchmarks.{name}"], full or [], quick or [], HERE / f"{name}.py")


BENCHMARKS = (
    module(
        "engine_steps", ["--steps", "1000", "--repeat", "5"], ["--steps", "100", "--repeat", "1"]
    ),
    module(
        "dbos_steps",
        ["--steps", "300", "--repeat", "5", "--kill-repeat", "3"],
        [
            "--steps",
            "50",
            "--repeat",
            "1",
            "--tx-runs",
            "5",
            "--tx-repeat",
            "1",
            "--suspended",
            "10,100",
            "--window",
            "2",
            "--kill-repeat",
            "1",
        ],
    ),
    module("agents_turns", ["--repeat", "20"], ["--repeat", "2"]),
    Bench(
        "langgraph_superstep",
        [str(HERE / "langgraph_superstep.py")],
        ["--reps", "40", "--warmup", "3"],
        ["--reps", "3", "--warmup", "1"],
        HERE / "langgraph_superstep.py",
    ),
    module(
        "gateway_overhead",
        ["--calls", "300", "--repeat", "5"],
        ["--calls", "30", "--repeat", "1"],
    ),
    module(
        "scale",
        ["--runs", "10,100,1000,10000", "--histories", "10,100,1000,10000", "--repeat", "3"],
        ["--runs", "10,100,1000", "--histories", "10,100,1000", "--repeat", "1"],
    ),
)


def temporal_benches() -> list[Bench]:
    """``benchmarks/temporal_all.py``: the Temporal parts (``temporal_scale``,
    ``temporal_steps``, ``temporal_plugins``) in one run on one dev server, as issue
    #15 asks; each part stays runnable on its own."""
    return [module("temporal_all")]


@dataclass
class Layout:
    """Where a sitting writes and what it may run: the harness's seam for tests."""

    report: Path = HERE / "RESULTS.md"
    results: Path = HERE / "results"
    benches: list[Bench] = field(default_factory=lambda: [*BENCHMARKS, *temporal_benches()])


def run_one(bench: Bench, quick: bool, results: Path, started: str) -> Run:
    """Run one benchmark in a subprocess, echoing and keeping its output."""
    out = _records.figures_path(results, bench.name)
    out.unlink(missing_ok=True)  # only what this run writes counts as its figures
    argv = [*bench.target, *(bench.quick if quick else bench.full), "--json", str(out)]
    shown = ["python", *(a.replace(str(ROOT) + "/", "") for a in argv)]
    shown = [a.replace(str(ROOT) + "/", "") for a in shown]
    run = Run(bench.name, shown, started=started, quick=quick)
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


def finish(run: Run, previous: Run | None, results: Path) -> None:
    """Keep ``run`` as its module's record and redraw its charts; a run that wrote no
    figures keeps the figures (and charts) of the module's previous run, saying so."""
    if run.figures:
        run.figures_from = run.started
        _charts.remove(results, run.name)
        _charts.draw(run.figures, results, run.name)
    elif previous is not None and previous.figures:
        run.figures, run.figures_from = previous.figures, previous.figures_from
        run.note = "; ".join(
            n for n in (run.note, f"no figures: those shown are from {run.figures_from}") if n
        )
    _records.save(results, run)
    _records.figures_path(results, run.name).unlink(missing_ok=True)


def lost_modules(text: str, runs: list[Run], where: str) -> list[str]:
    """Modules the report shows now that no record or run of this sitting stands for:
    rewriting the report would drop their figures."""
    old = _document.content(text, "summary", where)
    have = {r.name for r in runs}
    return [n for n in _report.listed_modules(old or "") if n not in have]


def write_report(layout: Layout, runs: list[Run], sitting: _report.Sitting) -> bool:
    """Rewrite RESULTS.md's generated parts from ``runs``; False (and nothing written) if
    that would drop a module the report shows."""
    where = str(layout.report)
    text = layout.report.read_text(encoding="utf-8") if layout.report.exists() else ""
    lost = lost_modules(text, runs, where)
    if lost:
        print(
            f"\n{where} NOT rewritten: it shows {', '.join(lost)}, which left no record "
            "here (run them too, e.g. without --only); this sitting's records are kept.",
            flush=True,
        )
        return False
    charts = [c for r in runs for c in _charts.existing(layout.results, r.name)]
    parts = {
        "summary": _report.summary(runs, sitting),
        "details": _report.details(runs, sitting, charts, layout.report.parent),
    }
    layout.report.write_text(_document.splice(text, parts, where), encoding="utf-8")
    print(f"wrote {where} and {len(charts)} charts in {layout.results}/", flush=True)
    return True


def main(argv: list[str] | None = None, layout: Layout | None = None) -> int:
    """Run the benchmarks, update RESULTS.md; nonzero if any benchmark failed or the
    report could not be updated without dropping figures."""
    layout = layout or Layout()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for smoke tests")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks (by name)")
    ns = parser.parse_args(argv)
    names = [b.name for b in layout.benches]
    unknown = sorted(set(ns.only or []) - set(names))
    if unknown:
        parser.error(f"--only: no benchmark named {', '.join(unknown)} (known: {', '.join(names)})")
    chosen = [b for b in layout.benches if not ns.only or b.name in ns.only]
    load_start = os.getloadavg()
    started = _records.stamp(datetime.now(UTC))
    layout.results.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    fresh: dict[str, Run] = {}
    for bench in chosen:
        previous = _records.load(layout.results, bench.name)
        run = run_one(bench, ns.quick, layout.results, started)
        finish(run, previous, layout.results)
        fresh[bench.name] = run
    runs = [fresh.get(n) or _records.load(layout.results, n) for n in names]
    shown = [r for r in runs if r is not None]
    sitting = _report.Sitting(
        started=started,
        total=time.perf_counter() - t0,
        quick=ns.quick,
        ran=list(fresh),
        machine_info=_report.machine(load_start),
        version_info=_report.versions(PG_URL),
    )
    written = write_report(layout, shown, sitting)
    print("\nelapsed per benchmark:")
    for r in fresh.values():
        print(f"  {r.name:22} {r.elapsed:7.1f} s  exit {r.returncode}")
    print(f"  {'total':22} {sitting.total:7.1f} s")
    return 1 if not written or any(r.returncode for r in fresh.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
