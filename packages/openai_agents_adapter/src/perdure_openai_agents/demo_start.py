"""``python -m perdure_openai_agents.demo_start``: the demo's app process.

It starts the refund run with ``DurableRunner.start`` and drives it for as long as it
lives: to the approval (the run suspends; this process keeps waiting without holding
the run), then on after the approval, until the run ends or the demo kills it.
"""

from __future__ import annotations

import argparse
import asyncio

import perdure
from perdure_openai_agents import demo_agent


async def drive(prompt: str, run_id: str, url: str) -> None:
    """Start ``run_id`` and drive it whenever it is due, until it stops."""
    from perdure_openai_agents import DurableRunner

    try:
        await DurableRunner.start(demo_agent.refund_agent, prompt, run_id=run_id, url=url)
        backend = await perdure.connect(url)
        await backend.wait(run_id, drive=True)
    finally:
        await perdure.shutdown()


def main() -> None:
    """Parse ``--url --run-id --prompt`` and drive the run."""
    parser = argparse.ArgumentParser(prog="python -m perdure_openai_agents.demo_start")
    parser.add_argument("--url", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--prompt", required=True)
    ns = parser.parse_args()
    asyncio.run(drive(ns.prompt, ns.run_id, ns.url))


if __name__ == "__main__":
    main()
