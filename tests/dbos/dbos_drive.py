"""``python -m dbos_drive``: start one run, drive it to its next stop (``idle``), exit."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json

from perdure.api import connect, shutdown
from perdure.workflow import get_workflow


async def _main(ns: argparse.Namespace) -> None:
    importlib.import_module(ns.module)
    data = json.loads(ns.input)
    backend = await connect(ns.url)
    try:
        await backend.start(
            get_workflow(ns.workflow), tuple(data["args"]), data["kwargs"], run_id=ns.run_id
        )
        await backend.idle()  # type: ignore[attr-defined]
    finally:
        await shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m dbos_drive")
    for name in ("--url", "--module", "--workflow", "--run-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--input", default='{"args": [], "kwargs": {}}')
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
