"""Issue #15's Temporal benchmark in one run on one dev server, side by side.

    uv run python -m benchmarks.temporal_all [--runs 1000] [--large-pairs 2]
                                             [--batch 200] [--pairs 4]
                                             [--idle-runs 100] [--idle-seconds 30]
                                             [--per-step 200] [--per-step-repeat 5]
                                             [--turns 50] [--plugin-repeat 3]
                                             [--skip PART ...] [--quick] [--json PATH]
    nox -s bench_temporal [-- ARGS]

One ``perdure_temporal.devserver`` serves every part, one after the other:

* (a) ``benchmarks.temporal_scale``: concurrent 5-step runs of 20 ms I/O per step,
  perdure against bare Temporal activities, in interleaved pairs (``--pairs`` of
  ``--batch`` runs, then ``--large-pairs`` of ``--runs``; the side going first
  alternating), so the
  ratio is fair on a loaded machine; wall times, failures, the ratio pair by pair;
* (c) the same module's idle window: ``--idle-runs`` suspended runs with one waiting
  caller each, history events and RPCs per second;
* (b) ``benchmarks.temporal_steps``: per-step cost against a bare activity and a local
  activity (interleaved rounds), and history bytes per turn of a ``--turns``-turn
  conversation (perdure step, perdure Agents SDK, the naive whole-transcript activity);
* (d) ``benchmarks.temporal_plugins``: a LangGraph agent and an Agents SDK agent per
  turn, perdure against ``temporalio-langgraph`` and ``temporalio-openai-agents`` (their
  own virtualenv, a subprocess on the same server), history bytes per turn for all.

Each part prints its own tables; at the end one table holds every figure side by side
(perdure, its anchor, the ratio with its range, the target), and ``--json`` gets all of
them, each part's settings carrying the load average at its start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import temporal_plugins, temporal_scale, temporal_steps
from benchmarks._results import Figure, add_json_argument, target_of, write_json
from benchmarks._table import print_table
from perdure_temporal.devserver import DevServer

#: Seconds a full run may take on this machine (the harness kills it at twice that).
BENCH_BUDGET_SECONDS = 900
PARTS = ("scale", "steps", "plugins")
ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The checkout's commit (``+`` when its tracked files differ from it)."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--"], check=False
    ).returncode
    return head + ("+" if dirty else "")


def load() -> float:
    return os.getloadavg()[0]


async def part(name: str, body: Callable[[], Awaitable[list[Figure]]]) -> list[Figure]:
    """Run one part; its figures' settings say the load average around it."""
    t0, load0 = time.perf_counter(), load()
    print(f"\n===== {name} (load {load0:.1f}, {datetime.now(UTC):%H:%M:%S} UTC)", flush=True)
    figures = await body()
    took, load1 = time.perf_counter() - t0, load()
    print(f"===== {name}: {took:.0f} s, load {load0:.1f} -> {load1:.1f}", flush=True)
    for f in figures:
        f.settings += f"; load average {load0:.1f} at the part's start, {load1:.1f} at its end"
        f.params.setdefault("load", [round(load0, 2), round(load1, 2)])
    return figures


def number(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def with_range(x: float | None, span: Sequence[float] | None, n: int) -> str:
    if x is None:
        return "-"
    if span is None or n < 2 or span[0] == span[1]:
        return number(x)
    return f"{number(x)} [{number(span[0])}-{number(span[1])}]"


def verdict(figure: dict[str, Any]) -> str:
    target = target_of(figure)
    if target is None:
        return ""
    met = target.met(figure)
    return "-" if met is None else ("met" if met else "MISSED")


def side_by_side(figures: Sequence[Figure], title: str) -> None:
    """Every figure in one table: perdure, its anchor, the ratio, the target."""
    rows: list[list[str]] = []
    anchors: dict[str, str] = {}
    for f in figures:
        j = f.to_json()
        anchor = "-"
        if j["anchor"]:
            anchor = anchors.setdefault(j["anchor"], f"A{len(anchors) + 1}")
        ratio = "-" if j["ratio"] is None else f"{j['ratio']:.3g}x"
        if j["ratio_spread"]:
            ratio += f" [{j['ratio_spread'][0]:.3g}-{j['ratio_spread'][1]:.3g}]"
        rows.append(
            [
                j["figure"],
                with_range(j["value"], j["spread"], j["n"]),
                anchor,
                with_range(j["anchor_value"], j["anchor_spread"], j["n"]),
                ratio,
                j["unit"],
                verdict(j),
            ]
        )
    print_table(
        title,
        ["figure", "perdure", "anchor", "anchor value", "perdure/anchor", "unit", "target"],
        rows,
        [50, 26, 6, 26, 22, 10, 6],
        align="<><>><<",
    )
    print("  anchors:")
    for text, key in anchors.items():
        print(f"    {key}: {text}")


async def main(ns: argparse.Namespace) -> list[Figure]:
    started = datetime.now(UTC)
    at_start = os.getloadavg()
    print(f"temporal_all on {commit()}, {started:%Y-%m-%d %H:%M} UTC, load {at_start}")
    sizes = temporal_scale.schedule(ns.runs, ns.batch, ns.pairs, ns.large_pairs)
    figures: list[Figure] = []
    t0 = time.perf_counter()
    with DevServer() as server:
        print(f"one dev server for every part, up in {time.perf_counter() - t0:.1f} s")
        if "scale" not in ns.skip:
            figures += await part(
                "(a) concurrency, (c) idle: temporal_scale",
                lambda: temporal_scale.measure(
                    server, sizes, ns.steps, ns.io_ms, ns.idle_runs, ns.idle_seconds
                ),
            )
        if "steps" not in ns.skip:
            figures += await part(
                "(b) per step, history bytes per turn: temporal_steps",
                lambda: temporal_steps.measure(server, ns.per_step, ns.per_step_repeat, ns.turns),
            )
        if "plugins" not in ns.skip:
            figures += await part(
                "(d) agents per turn against Temporal's plugins: temporal_plugins",
                lambda: temporal_plugins.measure(server, ns.turns, ns.plugin_repeat),
            )
    at_end = os.getloadavg()
    side_by_side(
        figures,
        f"issue #15, one run on one dev server: {commit()}, {started:%Y-%m-%d %H:%M}-"
        f"{datetime.now(UTC):%H:%M} UTC, load average {at_start[0]:.1f} at start, "
        f"{at_end[0]:.1f} at end",
    )
    return figures


def cli(argv: Sequence[str] | None = None) -> None:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    temporal_scale.add_arguments(parser)
    parser.add_argument("--per-step", type=int, default=200, help="steps per per-step run")
    parser.add_argument("--per-step-repeat", type=int, default=5, help="per-step rounds")
    parser.add_argument("--turns", type=int, default=50, help="turns per conversation")
    parser.add_argument("--plugin-repeat", type=int, default=3, help="plugin rounds")
    parser.add_argument("--skip", nargs="*", choices=PARTS, default=[], help="parts left out")
    parser.add_argument("--quick", action="store_true", help="small counts, for smoke tests")
    add_json_argument(parser)
    ns = parser.parse_args(argv)
    if ns.quick or os.environ.get("PERDURE_BENCH_QUICK") == "1":
        temporal_scale.quick(ns)
        ns.per_step, ns.per_step_repeat = min(ns.per_step, 20), 1
        ns.turns, ns.plugin_repeat = min(ns.turns, 5), 1
    write_json(ns.json, asyncio.run(main(ns)))


if __name__ == "__main__":
    # Run from the importable modules, so Temporal's sandbox and the workers' locators
    # find the workflows, the graph and the agent.
    from benchmarks.temporal_all import cli as _cli

    _cli()
