"""``perdure demo``: the adapters ship the demo; this only finds and starts it."""

from __future__ import annotations

import asyncio
import enum
import importlib
import inspect
from typing import Any

from perdure._cli.common import EXIT_ERROR, CliError


class Framework(str, enum.Enum):
    OPENAI_AGENTS = "openai-agents"
    LANGGRAPH = "langgraph"


_MODULES = {
    Framework.OPENAI_AGENTS: "perdure_openai_agents.demo",
    Framework.LANGGRAPH: "perdure_langgraph.demo",
}


def run_demo(url: str | None, framework: Framework) -> int:
    """Import the adapter's ``demo`` module and return its ``main(url)``'s exit code."""
    name = _MODULES[framework]
    extra = f"perdure[{framework.value}]"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise CliError(
            f"the demo needs {extra} (pip install '{extra}'): {exc}", EXIT_ERROR
        ) from exc
    main: Any = getattr(module, "main", None)
    if not callable(main):
        raise CliError(f"{name} has no main(url) function", EXIT_ERROR)
    code: Any = main(url)
    if inspect.isawaitable(code):
        code = asyncio.run(_await(code))
    return code if isinstance(code, int) else 0


async def _await(awaitable: Any) -> Any:
    return await awaitable
