"""Per-superstep checkpoint cost of LangGraph savers, measured side by side in one run.

A 50-node linear ``StateGraph`` (each node sets one small key) is invoked with
``durability="sync"`` under: no checkpointer, ``InMemorySaver``, ``SqliteSaver`` (file),
``PostgresSaver``, and ``PerdureSaver`` on SQLite (``synchronous=FULL``, equal to
SqliteSaver's default, and our default ``NORMAL``) and on PostgreSQL. Configurations are
interleaved round by round so that drifting disk latency hits all of them alike.

    python benchmarks/langgraph_superstep.py [--reps 20] [--no-postgres] [--json PATH]

Per-superstep overhead = (median invoke time with the saver - median without one) / 50.
PostgreSQL: ``PERDURE_BENCH_POSTGRES_URL``, else ``PERDURE_TEST_POSTGRES_URL``, else
``postgresql://postgres@127.0.0.1:5432/test``; each saver gets a throwaway schema.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from perdure_langgraph import PerdureSaver

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
from benchmarks._results import Figure, Target, add_json_argument, write_json
from benchmarks._table import print_table

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 90
NODES = 50
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
TARGET = 0.7
SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}

State = TypedDict("State", {f"k{i}": int for i in range(NODES)})  # type: ignore[misc]


def build_graph() -> StateGraph:
    """A linear graph of ``NODES`` nodes; node i writes key ``k{i}``."""

    def node(i: int) -> Callable[[Any], dict[str, int]]:
        def run(state: Any) -> dict[str, int]:
            return {f"k{i}": i}

        return run

    builder = StateGraph(State)
    for i in range(NODES):
        builder.add_node(f"n{i}", node(i))
    builder.add_edge(START, "n0")
    for i in range(NODES - 1):
        builder.add_edge(f"n{i}", f"n{i + 1}")
    builder.add_edge(f"n{NODES - 1}", END)
    return builder


@dataclass
class Config:
    """One saver configuration under test."""

    name: str
    saver: BaseCheckpointSaver | None
    settings: str
    times: list[float] = field(default_factory=list)
    graph: Any = None


def _pg_url() -> str:
    return (
        os.environ.get("PERDURE_BENCH_POSTGRES_URL")
        or os.environ.get("PERDURE_TEST_POSTGRES_URL")
        or DEFAULT_PG
    )


@contextmanager
def _pg_schema(base: str, prefix: str) -> Iterator[str]:
    import psycopg

    schema = f"{prefix}_{secrets.token_hex(4)}"
    try:
        yield schema
    finally:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def _with_param(url: str, key: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{key}={value}"


def make_configs(stack: ExitStack, workdir: Path, postgres: bool) -> list[Config]:
    """Open every saver under test (closed by ``stack``)."""
    configs = [
        Config("no checkpointer", None, "-"),
        Config("InMemorySaver", InMemorySaver(), "memory"),
    ]
    conn = sqlite3.connect(workdir / "sqlitesaver.db", check_same_thread=False)
    stack.callback(conn.close)
    sqlite_saver = SqliteSaver(conn)
    sqlite_saver.setup()
    level = SYNC_NAMES[conn.execute("PRAGMA synchronous").fetchone()[0]]
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    configs.append(Config("SqliteSaver", sqlite_saver, f"{mode}, synchronous={level}"))

    conn_n = sqlite3.connect(workdir / "sqlitesaver_normal.db", check_same_thread=False)
    stack.callback(conn_n.close)
    sqlite_normal = SqliteSaver(conn_n)
    sqlite_normal.setup()
    conn_n.execute("PRAGMA synchronous=NORMAL")
    level_n = SYNC_NAMES[conn_n.execute("PRAGMA synchronous").fetchone()[0]]
    configs.append(Config("SqliteSaver (NORMAL)", sqlite_normal, f"{mode}, synchronous={level_n}"))

    for level_name in ("full", "normal"):
        url = f"sqlite:///{workdir / f'perdure_{level_name}.db'}?synchronous={level_name}"
        saver = PerdureSaver.from_url(url)
        stack.callback(saver.close)
        pragma = saver.driver.pragma  # type: ignore[attr-defined]
        conn_level = SYNC_NAMES[pragma("synchronous")]
        settings = f"{pragma('journal_mode')}, synchronous={level_name.upper()}"
        if conn_level != level_name.upper():
            settings += f"* (connection {conn_level})"
        configs.append(Config(f"PerdureSaver sqlite {level_name.upper()}", saver, settings))
    if postgres:
        from langgraph.checkpoint.postgres import PostgresSaver

        base = _pg_url()
        ref_schema = stack.enter_context(_pg_schema(base, "bench_pgsaver"))
        import psycopg

        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{ref_schema}"'.encode())
        pg_saver = stack.enter_context(
            PostgresSaver.from_conn_string(
                _with_param(base, "options", f"-csearch_path%3D{ref_schema}")
            )
        )
        pg_saver.setup()
        with psycopg.connect(base) as c:
            sync_commit = c.execute("SHOW synchronous_commit").fetchone()
        settings = f"synchronous_commit={sync_commit[0] if sync_commit else '?'}"
        configs.append(Config("PostgresSaver", pg_saver, settings))
        our_schema = stack.enter_context(_pg_schema(base, "bench_perdure"))
        ours = PerdureSaver.from_url(_with_param(base, "schema", our_schema))
        stack.callback(ours.close)
        configs.append(Config("PerdureSaver postgresql", ours, settings))
    return configs


def invoke(config: Config, thread: str) -> float:
    """Time one invoke of the graph on a fresh thread."""
    cfg = {"configurable": {"thread_id": thread}}
    start = time.perf_counter()
    if config.saver is None:
        # durability= without a checkpointer is a no-op (and trips LangGraph 1.2.22)
        config.graph.invoke({"k0": -1}, cfg)
    else:
        config.graph.invoke({"k0": -1}, cfg, durability="sync")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20, help="rounds (default 20)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds (default 2)")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL savers")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    builder = build_graph()
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lg_bench_")))
        configs = make_configs(stack, workdir, postgres=not args.no_postgres)
        for c in configs:
            c.graph = builder.compile(checkpointer=c.saver)
        for r in range(args.warmup + args.reps):
            order = configs[r % len(configs) :] + configs[: r % len(configs)]
            for c in order:
                elapsed = invoke(c, f"{c.name}-{r}")
                if r >= args.warmup:
                    c.times.append(elapsed)
            print(".", end="", flush=True, file=sys.stderr)
        print(file=sys.stderr)
        report(configs, args.reps)
        write_json(args.json, figures(configs))
    return 0


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "_", text.lower()).strip("_")


def figures(configs: list[Config]) -> list[Figure]:
    """The figures: per-superstep overhead over no checkpointer, round by round, ours
    against each reference saver (ratio of the overheads, paired within a round)."""
    base = configs[0]
    by_name = {c.name: c for c in configs}

    def overhead(c: Config) -> list[float]:
        return [(t - b) / NODES * 1e3 for t, b in zip(c.times, base.times, strict=True)]

    target = Target("ratio", TARGET, f"<= {TARGET}x")
    pairs = [
        ("PerdureSaver sqlite FULL", "SqliteSaver", True, "synchronous=FULL on both"),
        ("PerdureSaver sqlite NORMAL", "SqliteSaver (NORMAL)", True, "synchronous=NORMAL on both"),
        (
            "PerdureSaver sqlite NORMAL",
            "SqliteSaver",
            False,
            "unequal: our default NORMAL vs SqliteSaver's default FULL",
        ),
        ("PerdureSaver postgresql", "PostgresSaver", True, "equal settings"),
        ("PerdureSaver sqlite NORMAL", "InMemorySaver", False, "durable vs in-memory"),
        ("PerdureSaver postgresql", "InMemorySaver", False, "durable vs in-memory"),
    ]
    out: list[Figure] = []
    for ours, theirs, equal, label in pairs:
        if ours not in by_name or theirs not in by_name:
            continue
        o, t = by_name[ours], by_name[theirs]
        out.append(
            Figure(
                _slug(f"langgraph.{ours}.vs.{theirs}"),
                "LangGraph per-superstep",
                f"{ours} overhead",
                "ms/superstep",
                overhead(o),
                anchor=f"{theirs} overhead",
                anchor_samples=overhead(t),
                settings=(
                    f"{NODES}-node linear graph, durability='sync', {label}; "
                    f"ours: {o.settings}; theirs: {t.settings}; overhead = invoke time "
                    "minus the same round's no-checkpointer invoke, / supersteps"
                ),
                target=target if equal else None,
            )
        )
    for c in configs[1:]:
        if c.name.startswith("PerdureSaver"):
            out.append(
                Figure(
                    _slug(f"langgraph.{c.name}.vs.none"),
                    "LangGraph per-superstep",
                    f"{c.name} invoke",
                    "ms/superstep",
                    [t / NODES * 1e3 for t in c.times],
                    anchor="no checkpointer invoke",
                    anchor_samples=[t / NODES * 1e3 for t in base.times],
                    settings=f"{NODES}-node linear graph, durability='sync'; {c.settings}",
                )
            )
    return out


def report(configs: list[Config], reps: int) -> None:
    """Print medians, per-superstep overheads and the ratios against the targets."""
    base = statistics.median(configs[0].times)
    overhead: dict[str, float] = {}
    rows: list[list[str]] = []
    for c in configs:
        med = statistics.median(c.times)
        per_step = (med - base) / NODES * 1000
        overhead[c.name] = per_step
        shown = "-" if c.saver is None else f"{per_step:.3f}"
        rows.append([c.name, c.settings, f"{med * 1000:.1f}", shown])
    print_table(
        f"{NODES}-node linear graph, durability='sync', median of {reps} interleaved runs",
        ["configuration", "settings", "run ms", "ms/step"],
        rows,
        [28, 42, 8, 8],
        align="<<>>",
    )
    if any("*" in c.settings for c in configs):
        print(
            "* FULL durability done by PerdureSaver itself: every write returns after an"
            " fdatasync of the WAL\n  (the connection commits at NORMAL; the flush runs"
            " outside the write lock and is shared by concurrent commits)"
        )
    pairs = [
        ("PerdureSaver sqlite FULL", "SqliteSaver", "equal settings: synchronous=FULL"),
        ("PerdureSaver sqlite NORMAL", "SqliteSaver (NORMAL)", "NORMAL on both (extra row)"),
        ("PerdureSaver sqlite NORMAL", "SqliteSaver", "our default vs SqliteSaver default"),
        ("PerdureSaver postgresql", "PostgresSaver", "equal settings"),
    ]
    by_name = {c.name: c for c in configs}
    ratios: list[list[str]] = []
    for ours, theirs, label in pairs:
        if ours in overhead and theirs in overhead and overhead[theirs] > 0:
            ratio = overhead[ours] / overhead[theirs]
            paired = _paired_ratio(configs[0], by_name[ours], by_name[theirs])
            verdict = "ok" if max(ratio, paired) <= TARGET else "MISSED"
            ratios.append(
                [f"{ours} / {theirs}", f"{ratio:.2f}", f"{paired:.2f}", verdict, f"({label})"]
            )
    print_table(
        f"per-superstep overhead ratios (target <= {TARGET}):",
        ["ours / theirs", "medians", "paired", "", ""],
        ratios,
        [50, 8, 8, 6, 0],
        align="<>><<",
    )
    print(
        "  medians: ratio of the median overheads; paired: median over rounds of the ratio"
        " within a round (robust to disk latency drifting between rounds)"
    )


def _paired_ratio(base: Config, ours: Config, theirs: Config) -> float:
    ratios = []
    for b, o, t in zip(base.times, ours.times, theirs.times, strict=True):
        if t > b:
            ratios.append((o - b) / (t - b))
    return statistics.median(ratios) if ratios else float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
