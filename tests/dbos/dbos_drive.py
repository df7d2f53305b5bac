"""``python -m dbos_drive``: start one run (or ``--count N``: runs ``RUN_ID-0`` ..
``RUN_ID-{N-1}``), drive them to their next stop (``idle``), exit."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json

from perdure._api import connect, shutdown
from perdure._workflow import get_workflow


async def _main(ns: argparse.Namespace) -> None:
    importlib.import_module(ns.module)
    data = json.loads(ns.input)
    backend = await connect(ns.url)
    try:
        run_ids = [ns.run_id] if ns.count is None else [f"{ns.run_id}-{i}" for i in range(ns.count)]
        for run_id in run_ids:
            await backend.start(
                get_workflow(ns.workflow), tuple(data["args"]), data["kwargs"], run_id=run_id
            )
        print("started", len(run_ids), flush=True)
        await backend.idle()  # type: ignore[attr-defined]
    finally:
        await shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m dbos_drive")
    for name in ("--url", "--module", "--workflow", "--run-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--input", default='{"args": [], "kwargs": {}}')
    parser.add_argument("--count", type=int, default=None)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
