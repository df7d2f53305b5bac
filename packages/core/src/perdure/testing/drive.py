"""``python -m perdure.testing.drive``: start one run and drive it to its next stop.

The process exits when the run finishes, suspends or parks — or when a test kills it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json

from perdure._api import connect, shutdown
from perdure._locate import allow_module
from perdure._workflow import get_workflow


async def _main(ns: argparse.Namespace) -> None:
    importlib.import_module(ns.module)
    allow_module(ns.module)
    workflow = get_workflow(ns.workflow)
    data = json.loads(ns.input)
    backend = await connect(ns.url)
    try:
        await backend.start(workflow, tuple(data["args"]), data["kwargs"], run_id=ns.run_id)
        await backend.idle()
    finally:
        await shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m perdure.testing.drive")
    parser.add_argument("--url", required=True)
    parser.add_argument("--module", required=True)
    parser.add_argument("--workflow", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--input", default='{"args": [], "kwargs": {}}')
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
