"""MCP servers listed live for ``perdure audit``: the servers ``[tool.perdure.mcp]``
names, connected with the ``mcp`` package, every tool they list reported with what its
annotations and perdure's gateway say.

``[tool.perdure.mcp]`` maps a server's name to its streamable-HTTP URL, or to the
command (a list) that starts it over stdio::

    [tool.perdure.mcp]
    mail = "http://127.0.0.1:8781/mcp"          # e.g. behind `perdure gateway mcp`
    files = ["python", "-m", "files_server"]

A tool is a read-only ``step`` only when the server annotates it ``readOnlyHint: true``;
one that perdure's MCP proxy fronts (``_meta["io.perdure/gateway"]``) is an effect
whose retries are deduplicated; anything else is ``undeclared`` unless
``[tool.perdure.tools]`` declares ``mcp:SERVER.TOOL``. A server that cannot be listed
is one ``undeclared`` entry saying why, so ``--strict`` fails on it.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from perdure._audit import Audit, Entry, perdure_table
from perdure._errors import ConfigurationError

if TYPE_CHECKING:
    from mcp.types import Tool

#: The ``_meta`` key perdure's MCP proxy puts on the tools whose calls it deduplicates.
GATEWAY_META = "io.perdure/gateway"

Target = str | list[str]


def load_mcp_servers(start: Path) -> tuple[Path | None, dict[str, Target]]:
    """``[tool.perdure.mcp]`` of the nearest ``pyproject.toml`` above ``start``."""
    found = perdure_table(start, "mcp")
    if found is None:
        return None, {}
    path, table = found
    servers: dict[str, Target] = {}
    for name, value in table.items():
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            servers[name] = value
        elif (
            isinstance(value, list)
            and value
            and all(isinstance(v, str) for v in cast(list[Any], value))
        ):
            servers[name] = [str(v) for v in cast(list[Any], value)]
        else:
            raise ConfigurationError(
                f"{path}: [tool.perdure.mcp] {name!r} = {value!r}: expected an http(s) URL "
                "or a command as a list of strings"
            )
    return path, servers


async def _list(target: Target, timeout: float) -> list[Tool]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if isinstance(target, str):
        return await _pages(Client(target, read_timeout_seconds=timeout))
    # The server's stderr goes to a file, not ours: a failure then quotes its last lines.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        params = StdioServerParameters(command=target[0], args=target[1:])
        try:
            return await _pages(
                Client(stdio_client(params, errlog=errlog), read_timeout_seconds=timeout)
            )
        except Exception as exc:
            errlog.seek(0)
            tail = " | ".join(errlog.read().strip().splitlines()[-3:])
            if tail:
                raise ConfigurationError(f"{_leaf(exc)}; its stderr ends: {tail}") from exc
            raise


async def _pages(client: Any) -> list[Tool]:
    tools: list[Tool] = []
    async with client:
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools


def _first(error: BaseException) -> BaseException:
    """The first real error inside task-group wrappers (``ExceptionGroup``)."""
    inner: tuple[BaseException, ...] = getattr(error, "exceptions", ())
    if inner:
        return _first(inner[0])
    return error


def _leaf(error: BaseException) -> str:
    """``Type: message`` of the first real error inside ``error``."""
    found = _first(error)
    detail = " ".join(str(found).split())
    return f"{type(found).__name__}: {detail}" if detail else type(found).__name__


async def list_servers(
    servers: Mapping[str, Target], timeout: float = 30.0
) -> dict[str, list[Tool] | BaseException]:
    """Each server's tools, or the error that kept it from listing them."""

    async def one(target: Target) -> list[Tool] | BaseException:
        try:
            return await asyncio.wait_for(_list(target, timeout), timeout)
        except Exception as exc:  # reported as the server's finding, not raised
            return exc

    names = list(servers)
    found = await asyncio.gather(*(one(servers[n]) for n in names))
    return dict(zip(names, found, strict=True))


def add_live(audit: Audit, name: str, listed: list[Tool] | BaseException) -> None:
    """Report server ``name``'s tools (or why they could not be listed) to ``audit``."""
    owner = f"mcp server {name}"
    if isinstance(listed, BaseException):
        audit.add(
            Entry(
                owner,
                "mcp-server",
                name,
                "undeclared",
                key=f"mcp:{name}",
                note=f"could not list its tools: {_leaf(listed)}",
            )
        )
        return
    for tool in listed:
        key = f"mcp:{name}.{tool.name}"
        hints = tool.annotations
        meta: dict[str, Any] = dict(tool.meta or {})
        via = meta.get(GATEWAY_META)
        if via:
            audit.add(
                Entry(
                    owner,
                    "mcp-tool",
                    f"{name}.{tool.name}",
                    "effect-idempotent",
                    key=key,
                    declared_by=f"perdure gateway {via}",
                    note="a call carrying an idempotency key in _meta reaches the upstream "
                    "once, however often it is retried",
                )
            )
        elif hints is not None and hints.read_only_hint:
            audit.add(
                Entry(
                    owner,
                    "mcp-tool",
                    f"{name}.{tool.name}",
                    "step",
                    key=key,
                    declared_by="MCP readOnlyHint",
                )
            )
        else:
            audit.add(
                Entry(
                    owner,
                    "mcp-tool",
                    f"{name}.{tool.name}",
                    "undeclared",
                    key=key,
                    note="the server does not annotate it read-only (readOnlyHint)",
                )
            )
