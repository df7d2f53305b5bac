"""perdure-dbos against plain DBOS, on dbos+sqlite and dbos+postgresql, in one run.

``python -m benchmarks.dbos_steps [--steps N] [--repeat R] [--tx-runs M] [--tx-repeat T]
[--suspended 10,100,1000] [--window S] [--no-background] [--kill-repeat K] [--no-postgres]
[--json PATH]``
prints, per database (SQLite: files in a temporary directory; PostgreSQL: a database of
its own on the shared server, dropped after; each part in its own schema):

* **per step**: the wall time of an N-step run of trivial steps over N, perdure-dbos
  (one DBOS workflow per run, one DBOS step per perdure step) against the same workflow
  written with ``@DBOS.workflow``/``@DBOS.step``, on one launched DBOS, interleaved round
  by round with the order flipped every round (ABBA...), the ratio taken round by round
  (median and range); perdure's embedded engine on the same database beside them.
  Target <= 1.1x.
* **transactions per run** of a 5-step run, both ways: a process runs M runs in a row,
  another the same time idle (launch, warm-up and exit the same), and the difference
  over M is counted: SQLAlchemy ``commit`` events of every engine in the process (DBOS's
  system engine carries DBOS's writes and perdure's tables alike; its ``rollback``
  events, reads ended without a commit, and its ``before_cursor_execute`` events, the
  SQL statements sent, beside), and on PostgreSQL the server's
  ``pg_stat_database.xact_commit`` of the benchmark's database (read before the process
  starts and after it exits: a backend flushes its counts when it ends). The server
  counts several times more than the engine for both: every pool checkout's pre-ping
  (``SELECT 1`` in autocommit) commits there too, and the rest was not traced.
* **background transactions per second** with 10, 100 and 1,000 runs suspended (waiting
  for a signal) and nothing else to do: perdure with a worker (``serve``) idle, plain
  DBOS with as many workflows waiting in ``DBOS.recv``. Target: flat in the count.
  ``--no-background`` skips it (and ``--kill-repeat 0`` the next part).
* **SIGKILL to resumed step across hosts**: a worker (executor id host-a) serves; a
  process with executor id host-b/i starts a 30-step run, blocks in step 10 and is
  SIGKILLed; the figure is the time from the kill to host-a's first resumed step. It is
  dominated by ``PERDURE_DBOS_EXECUTOR_TIMEOUT`` (host-b is dead once its heartbeat is
  that old), set short here and reported beside it. Plain DBOS has no anchor: without
  Conductor it never recovers another host's workflows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from benchmarks._results import Figure, Target, add_json_argument, write_json

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 600
ROOT = Path(__file__).resolve().parent.parent
PG_BASE = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: Issue 16: perdure-dbos within 1.1x of plain DBOS per step.
PER_STEP = Target("ratio", 1.1, "<= 1.1x plain DBOS")
#: Issue 16: background transactions do not grow with the suspended runs; read as the
#: rate at the largest count within 1.2x the rate at the smallest.
FLAT = Target("ratio", 1.2, "flat: <= 1.2x the rate at 10 runs")
#: The executor timeout of the cross-host figure (seconds).
KILL_TIMEOUT = 2.0
TX_STEPS = 5


@dataclass(frozen=True)
class Database:
    """Where one database's parts run: ``url(part)`` is a ``dbos+`` URL, and on
    PostgreSQL the server's commit counter is read for ``name``."""

    kind: str
    root: str
    name: str | None = None

    def url(self, part: str) -> str:
        if self.kind == "sqlite":
            return f"dbos+sqlite:///{self.root}/{part}.db"
        return f"dbos+{self.root}?schema={part}"

    def embedded(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.root}/embedded.db"
        return f"{self.root}?schema=embedded"

    def xact_commit(self) -> int | None:
        return xact_commit(PG_BASE if self.name else None, self.name)


def xact_commit(admin_url: str | None, database: str | None) -> int | None:
    """The server's count of commits in ``database`` (None off PostgreSQL), read from
    another database so the reading does not count."""
    if admin_url is None or database is None:
        return None
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def pg_database() -> Iterator[Database]:
    """A database of its own on the shared server, dropped afterwards."""
    name = f"perdure_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_BASE, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    parts = urlsplit(PG_BASE)
    url = urlunsplit(parts._replace(path=f"/{name}", query=""))
    try:
        yield Database("postgresql", url, name)
    finally:
        with psycopg.connect(PG_BASE, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


# -- child processes ---------------------------------------------------------------------


def spawn(
    part: str, args: dict[str, Any], env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks._dbos_children", part, json.dumps(args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def figures_of(out: str) -> Any:
    line = next(x for x in reversed(out.splitlines()) if x.startswith("FIGURES "))
    return json.loads(line.removeprefix("FIGURES "))


def run_part(part: str, args: dict[str, Any], timeout: float = 600) -> Any:
    proc = spawn(part, args)
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"part {part} exited {proc.returncode}:\n{out[-2000:]}")
    return figures_of(out)


def settled_xact(db: Database) -> int | None:
    """The server's commit count once the exited process's backends have reported."""
    last = db.xact_commit()
    if last is None:
        return None
    while True:
        time.sleep(0.3)
        now = db.xact_commit()
        assert now is not None
        if now == last:
            return now
        last = now


# -- the parts ---------------------------------------------------------------------------


def per_step(db: Database, n: int, times: int) -> dict[str, list[float]]:
    args = {"dbos_url": db.url("steps"), "embedded_url": db.embedded(), "n": n, "times": times}
    return run_part("steps", args)


def tx_counts(db: Database, runs: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    """Per kind (perdure, plain), per run: commits and reads by the engine's count, and
    commits by the server's."""
    out: dict[str, dict[str, list[float]]] = {
        k: {"engine": [], "reads": [], "statements": [], "server": []} for k in ("perdure", "plain")
    }
    for _ in range(repeat):
        for kind in ("perdure", "plain"):
            base = {"kind": kind, "dbos_url": db.url(f"tx_{kind}"), "steps": TX_STEPS}
            x0 = settled_xact(db)
            busy = run_part("tx", {**base, "runs": runs, "idle": 0})
            x1 = settled_xact(db)
            quiet = run_part("tx", {**base, "runs": 0, "idle": busy["seconds"]})
            x2 = settled_xact(db)
            out[kind]["engine"].append((busy["commits"] - quiet["commits"]) / runs)
            out[kind]["reads"].append((busy["rollbacks"] - quiet["rollbacks"]) / runs)
            out[kind]["statements"].append((busy["statements"] - quiet["statements"]) / runs)
            if x0 is not None and x1 is not None and x2 is not None:
                out[kind]["server"].append(((x1 - x0) - (x2 - x1)) / runs)
    return out


def background(db: Database, counts: list[int], window: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("perdure", "plain"):
        args = {
            "kind": kind,
            "dbos_url": db.url(f"idle_{kind}"),
            "counts": counts,
            "window": window,
            "settle": 1.0,
            "admin_url": PG_BASE if db.name else None,
            "database": db.name,
        }
        out[kind] = run_part("idle", args, timeout=900)
    return out


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _expect(lines: queue.Queue[str], prefix: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if line.startswith(prefix):
            return line


def cross_host(db: Database, repeat: int) -> list[float]:
    """Seconds from SIGKILL of host-b to host-a's first resumed step, per repeat."""
    url = db.url("kill")
    timeout = {"PERDURE_DBOS_EXECUTOR_TIMEOUT": str(KILL_TIMEOUT)}
    host_a = spawn(
        "worker", {"dbos_url": url}, {"DBOS__VMID": "host-a", "BENCH_RESUME": "1", **timeout}
    )
    a_lines = _lines(host_a)
    out: list[float] = []
    try:
        _expect(a_lines, "READY")
        for i in range(repeat):
            run = {"dbos_url": url, "run_id": f"kill-{uuid.uuid4().hex}", "steps": 30}
            host_b = spawn(
                "hostb", run, {"DBOS__VMID": f"host-b/{i}", "BENCH_BLOCK": "1", **timeout}
            )
            b_lines = _lines(host_b)
            _expect(b_lines, "BLOCKED")
            host_b.kill()
            killed = time.time()
            host_b.wait()
            resumed = float(_expect(a_lines, "RESUMED").split()[1])
            out.append(resumed - killed)
    finally:
        assert host_a.stdin is not None
        host_a.stdin.close()
        try:
            host_a.wait(timeout=60)
        except subprocess.TimeoutExpired:
            host_a.kill()
    return out


# -- figures -----------------------------------------------------------------------------


def _us(xs: list[float]) -> list[float]:
    return [x * 1e6 for x in xs]


def figures_of_db(db: str, m: dict[str, Any], ns: argparse.Namespace) -> list[Figure]:
    steps, tx, idle, kill = m["steps"], m["tx"], m["idle"], m["kill"]
    step_set = f"{ns.steps} trivial steps/run, {ns.repeat} interleaved rounds after 1 warm-up"
    if db == "sqlite":
        step_set += "; SQLite in WAL at DBOS's synchronous=FULL, perdure embedded at NORMAL"
    figures = [
        Figure(
            f"per_step.dbos.{db}.perdure_dbos",
            "per-step overhead",
            f"perdure-dbos, {db}",
            "µs/step",
            _us(steps["perdure"]),
            anchor=f"plain DBOS, {db} (same launched DBOS)",
            anchor_samples=_us(steps["plain"]),
            settings=step_set,
            target=PER_STEP,
        ),
        Figure(
            f"per_step.dbos.{db}.embedded",
            "per-step overhead",
            f"perdure embedded engine, {db}",
            "µs/step",
            _us(steps["embedded"]),
            anchor=f"plain DBOS, {db}",
            anchor_samples=_us(steps["plain"]),
            settings=step_set,
        ),
    ]
    tx_set = (
        f"{TX_STEPS}-step runs, {ns.tx_runs} in a row, minus a process idle as long; "
        f"{ns.tx_repeat} repeats"
    )
    for counter, how in (
        ("engine", "SQLAlchemy commit events of every engine in the process"),
        ("reads", "SQLAlchemy rollback events: reads ended without a commit"),
        ("statements", "SQLAlchemy before_cursor_execute events: SQL statements sent"),
        ("server", "pg_stat_database.xact_commit of the benchmark's own database"),
    ):
        if not tx["perdure"][counter]:
            continue
        what = "SQL statements" if counter == "statements" else "transactions"
        figures.append(
            Figure(
                f"dbos.tx_per_run.{db}.{counter}",
                "DBOS",
                f"{what} per {TX_STEPS}-step run, perdure-dbos, {db} ({counter} count)",
                "statements/run" if counter == "statements" else "tx/run",
                tx["perdure"][counter],
                anchor=f"plain DBOS, {db}",
                anchor_samples=tx["plain"][counter],
                settings=f"{tx_set}; counted as {how}",
            )
        )
    counts = sorted(int(c) for c in idle.get("perdure", {}))
    for kind, subject in (("perdure", "perdure-dbos, worker idle"), ("plain", "plain DBOS")):
        rate = {c: idle[kind][str(c)]["engine_per_s"] for c in counts}
        for c in counts:
            server = idle[kind][str(c)]["server_per_s"]
            figures.append(
                Figure(
                    f"dbos.background.{db}.{kind}.{c}",
                    "DBOS",
                    f"background tx/s, {c:,} suspended runs, {subject}, {db}",
                    "tx/s",
                    [rate[c]],
                    anchor=f"the same at {counts[0]} runs" if c != counts[0] else None,
                    anchor_samples=[rate[counts[0]]] if c != counts[0] else None,
                    settings=(
                        f"{ns.window:.0f} s window after the runs suspended; SQLAlchemy commit "
                        "events"
                        + ("" if server is None else f"; server xact_commit {server:.1f}/s")
                    ),
                    target=FLAT if c == counts[-1] and kind == "perdure" else None,
                    params={"suspended": c, "server_per_s": server},
                )
            )
    if not kill:
        return figures
    figures.append(
        Figure(
            f"recovery.cross_host.{db}.perdure_dbos",
            "recovery",
            f"SIGKILL host-b -> resumed step on host-a, perdure-dbos, {db}",
            "ms",
            [x * 1e3 for x in kill],
            settings=(
                f"PERDURE_DBOS_EXECUTOR_TIMEOUT={KILL_TIMEOUT:g} s (heartbeat every "
                f"{KILL_TIMEOUT / 6:.2f} s); host-a serving before the kill; kill in step "
                "10 of 30; the timeout dominates"
            ),
            params={"executor_timeout_s": KILL_TIMEOUT},
        )
    )
    return figures


def measure(db: Database, ns: argparse.Namespace) -> dict[str, Any]:
    counts = [int(c) for c in ns.suspended.split(",")]
    print(f"[{db.kind}] per step ...", flush=True)
    m: dict[str, Any] = {"steps": per_step(db, ns.steps, ns.repeat)}
    print(f"[{db.kind}] transactions per run ...", flush=True)
    m["tx"] = tx_counts(db, ns.tx_runs, ns.tx_repeat)
    m["idle"], m["kill"] = {}, []
    if not ns.no_background:
        print(f"[{db.kind}] background with {counts} suspended runs ...", flush=True)
        m["idle"] = background(db, counts, ns.window)
    if ns.kill_repeat:
        print(f"[{db.kind}] SIGKILL across hosts ...", flush=True)
        m["kill"] = cross_host(db, ns.kill_repeat)
    return m


def _med(xs: list[float], digits: int = 1) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


def print_table(db: str, m: dict[str, Any]) -> None:
    s, tx, idle = m["steps"], m["tx"], m["idle"]
    ratios = [a / b for a, b in zip(s["perdure"], s["plain"], strict=True)]
    print(f"\n== {db}")
    print(
        f"per step (µs):   perdure-dbos {_med(_us(s['perdure']))}   plain DBOS "
        f"{_med(_us(s['plain']))}   embedded {_med(_us(s['embedded']))}"
    )
    print(
        f"per-step ratio perdure-dbos / plain DBOS, round by round: {_med(ratios, 3)} "
        f"(n={len(ratios)}, target <= 1.1)"
    )
    for counter in ("engine", "reads", "statements", "server"):
        if tx["perdure"][counter]:
            print(
                f"tx per {TX_STEPS}-step run ({counter}): perdure-dbos "
                f"{_med(tx['perdure'][counter])}   plain DBOS {_med(tx['plain'][counter])}"
            )
    for kind in idle:
        rates = ", ".join(
            f"{int(c):,}: {v['engine_per_s']:.1f}"
            + ("" if v["server_per_s"] is None else f" (server {v['server_per_s']:.1f})")
            for c, v in idle[kind].items()
        )
        print(f"background tx/s by suspended runs, {kind}: {rates}")
    if m["kill"]:
        print(
            f"SIGKILL host-b -> resumed on host-a (ms, executor timeout {KILL_TIMEOUT:g} s): "
            f"{_med([x * 1e3 for x in m['kill']])}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3, help="per-step rounds (default 3)")
    parser.add_argument("--tx-runs", type=int, default=50, help="runs per count (default 50)")
    parser.add_argument("--tx-repeat", type=int, default=2, help="transaction counts (default 2)")
    parser.add_argument("--suspended", default="10,100,1000", help="suspended-run counts")
    parser.add_argument("--window", type=float, default=5.0, help="background window, s")
    parser.add_argument("--no-background", action="store_true", help="skip the suspended runs")
    parser.add_argument(
        "--kill-repeat", type=int, default=3, help="SIGKILL rounds (default 3; 0 skips)"
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    add_json_argument(parser)
    ns = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    figures: list[Figure] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = measure(Database("sqlite", tmp), ns)
    if not ns.no_postgres:
        with pg_database() as db:
            results["postgresql"] = measure(db, ns)
    for db, m in results.items():
        print_table(db, m)
        figures += figures_of_db(db, m, ns)
    print(f"\nload average at end: {os.getloadavg()}", flush=True)
    write_json(ns.json, figures)


if __name__ == "__main__":
    main()
