"""Per-turn overhead of ``DurableRunner`` against the plain Agents SDK ``Runner``.

    uv run python -m benchmarks.agents_turns [--repeat 5] [--json PATH]

One agent, a deterministic model (``ConversationModel``: no network, no latency) that
calls a tool on each of ``turns`` turns and then answers. The same run under plain
``Runner.run`` and under ``DurableRunner.run`` on SQLite and PostgreSQL; the overhead
per turn (one model step plus one tool step) is reported in µs and as a ratio. The three
runners are interleaved round by round; the ratio is taken within each round.
(``PERDURE_BENCH_TURNS`` sets the number of turns, default 20.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid

import psycopg
from agents import Agent, Runner, function_tool

from benchmarks._results import Figure, add_json_argument, write_json
from perdure._registry import open_backend
from perdure_openai_agents import DurableRunner
from perdure_openai_agents.testing import Conversation, ConversationModel, Reply, tool_call

#: Seconds a full run may take here (python -m benchmarks kills it at twice that).
BENCH_BUDGET_SECONDS = 60
PG_BASE = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TURNS = int(os.environ.get("PERDURE_BENCH_TURNS", "20"))


@function_tool
def add_one(n: int) -> int:
    """Add one to n."""
    return n + 1


def respond(conv: Conversation) -> Reply:
    done = len(conv.of_type("function_call_output"))
    if done < TURNS:
        return tool_call("add_one", {"n": done})
    return f"done after {done} tool calls"


agent = Agent(
    name="counter", instructions="count", model=ConversationModel(respond), tools=[add_one]
)


async def plain() -> float:
    t0 = time.perf_counter()
    result = await Runner.run(agent, "count", max_turns=TURNS + 2)
    assert result.final_output == f"done after {TURNS} tool calls"
    return time.perf_counter() - t0


async def durable(url: str) -> float:
    backend = open_backend(url)
    await backend.open()
    try:
        t0 = time.perf_counter()
        result = await DurableRunner.run(
            agent, "count", max_turns=TURNS + 2, run_id=uuid.uuid4().hex, backend=backend
        )
        elapsed = time.perf_counter() - t0
    finally:
        await backend.close()
    assert result.final_output == f"done after {TURNS} tool calls"
    return elapsed


async def main(times: int) -> list[Figure]:
    """Print the table; return the figures."""
    tmp = tempfile.mkdtemp(prefix="perdure-bench-")
    schema = f"perdure_bench_{uuid.uuid4().hex[:8]}"
    urls = {
        "sqlite": f"sqlite:///{tmp}/agents.db",
        "postgresql": f"{PG_BASE}{'&' if '?' in PG_BASE else '?'}schema={schema}",
    }
    base: list[float] = []
    runs: dict[str, list[float]] = {name: [] for name in urls}
    try:
        await plain()  # warm imports and caches
        for url in urls.values():
            await durable(url)
        for _ in range(times):
            base.append(await plain())
            for name, url in urls.items():
                runs[name].append(await durable(url))
    finally:
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    b = statistics.median(base)
    print(f"\n{TURNS}-turn tool-calling run, median of {times} (turn = model call + tool)\n")
    print(f"{'runner':28} {'run':>10} {'per turn':>10} {'overhead/turn':>14} {'ratio':>7}")
    print(f"{'Runner (plain)':28} {b * 1e3:>8.1f}ms {b / TURNS * 1e6:>8.0f}µs {'-':>14} {1:>6.2f}x")
    figures: list[Figure] = []
    for name, samples in runs.items():
        d = statistics.median(samples)
        print(
            f"{'DurableRunner on ' + name:28} {d * 1e3:>8.1f}ms {d / TURNS * 1e6:>8.0f}µs "
            f"{(d - b) / TURNS * 1e6:>12.0f}µs {d / b:>6.2f}x"
        )
        figures.append(
            Figure(
                f"agents.turn.{name}",
                "Agents SDK per-turn",
                f"DurableRunner on {name}",
                "µs/turn",
                [x / TURNS * 1e6 for x in samples],
                anchor="plain Runner",
                anchor_samples=[x / TURNS * 1e6 for x in base],
                settings=(
                    f"{TURNS} turns (model call + tool call) per run, deterministic model, "
                    f"no network; overhead/turn {(d - b) / TURNS * 1e6:.0f} µs"
                ),
            )
        )
    return figures


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    add_json_argument(parser)
    ns = parser.parse_args()
    write_json(ns.json, asyncio.run(main(ns.repeat)))
