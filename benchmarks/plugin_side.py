"""Temporal's own agent integrations, driven by ``benchmarks.temporal_plugins``.

    <plugin venv>/bin/python -m benchmarks.plugin_side --target HOST:PORT --task-queue Q

Runs in its own virtualenv (``temporalio-openai-agents`` needs ``openai-agents<0.23``;
perdure's lock has a newer one), so it imports no perdure. It connects to the
benchmark's dev server, runs a worker per plugin (``temporalio-langgraph``'s
``LangGraphPlugin``, ``temporalio-openai-agents``' ``OpenAIAgentsPlugin``) with the
agents of ``benchmarks.agent_script``, prints ``{"ready": ...}`` and then, for each JSON
line ``{"framework": "langgraph" | "agents", "workflow_id": ..., "notes": N}`` read from
stdin, runs that agent as a workflow and prints one JSON line: the model calls' times
(``agent_script.MODEL_CALLS``) and the final answer.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from langchain_core.messages import HumanMessage
    from temporalio.langgraph import LangGraphPlugin, graph
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents import workflow as agents_workflow
    from temporalio.openai_agents.testing import TestModelProvider

    from benchmarks import agent_script

TIMEOUT = timedelta(seconds=120)
GRAPH = "notes"
VERSIONS = (
    "temporalio",
    "temporalio-langgraph",
    "temporalio-openai-agents",
    "openai-agents",
    "langgraph",
    "langchain-core",
)


@workflow.defn(name="bench.plugin_langgraph")
class LangGraphNotes:
    """The LangGraph agent under ``LangGraphPlugin``: both nodes run as activities."""

    @workflow.run
    async def run(self, notes: int) -> str:
        app = graph(GRAPH).compile()
        out = await app.ainvoke(
            {"messages": [HumanMessage(agent_script.prompt(notes))]},
            {"recursion_limit": agent_script.recursion_limit(notes)},
        )
        last = out["messages"][-1]
        return str(last["content"] if isinstance(last, dict) else last.content)


@activity.defn(name="take_note")
async def take_note(note: str) -> str:
    """Store a note; returns the archived copy."""
    return agent_script.archived(note)


@workflow.defn(name="bench.plugin_agents")
class AgentsNotes:
    """The Agents SDK agent under ``OpenAIAgentsPlugin``: the model call is the plugin's
    activity, the tool an activity (``activity_as_tool``)."""

    @workflow.run
    async def run(self, notes: int) -> str:
        agent = Agent(
            name="notes",
            instructions="take notes",
            tools=[agents_workflow.activity_as_tool(take_note, start_to_close_timeout=TIMEOUT)],
        )
        result = await Runner.run(agent, agent_script.prompt(notes), max_turns=notes + 2)
        return str(result.final_output)


async def serve(target: str, task_queue: str) -> None:
    """Run both plugins' workers; answer the benchmark's requests one by one."""
    options = {"execute_in": "activity", "start_to_close_timeout": TIMEOUT}
    langgraph_plugin = LangGraphPlugin(graphs={GRAPH: agent_script.build_graph(options)})
    agents_plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=TIMEOUT),
        model_provider=TestModelProvider(agent_script.ScriptedAgentModel()),
    )
    clients = {
        "langgraph": await Client.connect(target, plugins=[langgraph_plugin]),
        "agents": await Client.connect(target, plugins=[agents_plugin]),
    }
    workflows: dict[str, Any] = {"langgraph": LangGraphNotes, "agents": AgentsNotes}
    queues = {name: f"{task_queue}-{name}" for name in clients}
    async with (
        Worker(clients["langgraph"], task_queue=queues["langgraph"], workflows=[LangGraphNotes]),
        Worker(
            clients["agents"],
            task_queue=queues["agents"],
            workflows=[AgentsNotes],
            activities=[take_note],
        ),
    ):
        versions = {d: importlib.metadata.version(d) for d in VERSIONS}
        print(json.dumps({"ready": True, "versions": versions}), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            ask = json.loads(line)
            name = ask["framework"]
            agent_script.MODEL_CALLS.clear()
            answer = await clients[name].execute_workflow(
                workflows[name].run,
                ask["notes"],
                id=ask["workflow_id"],
                task_queue=queues[name],
            )
            reply = {"answer": answer, "model_calls": agent_script.MODEL_CALLS}
            print(json.dumps(reply), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the dev server's host:port")
    parser.add_argument("--task-queue", required=True, help="prefix of the workers' queues")
    ns = parser.parse_args()
    asyncio.run(serve(ns.target, ns.task_queue))


if __name__ == "__main__":
    # Run from the importable module, so Temporal's sandbox can import the workflows.
    from benchmarks.plugin_side import main as _main

    _main()
