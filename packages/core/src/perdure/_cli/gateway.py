"""``perdure gateway serve|status|forget``: run the idempotency gateway and look after
its ledger."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from collections.abc import Callable, Sequence
from enum import Enum

from rich.table import Table

from perdure._cli.common import EXIT_CONFIG, EXIT_NOT_FOUND, CliError, err, mask_url, out
from perdure._config import resolve_url


class Format(str, Enum):
    TABLE = "table"
    JSON = "json"


#: What the gateway's servers import (the gateway extra); the MCP proxy needs ``mcp`` too.
_EXTRA = ("httptools", "starlette", "uvicorn")


def _need_extra(*also: str) -> None:
    missing = [m for m in (*_EXTRA, *also) if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"the gateway needs the gateway extra: pip install 'perdure[gateway]' "
            f"(missing: {', '.join(missing)})",
            EXIT_CONFIG,
        )


async def _check_ledger(url: str) -> None:
    """Open the ledger once, so a wrong URL or an unreachable database is one clear error
    before the server starts (the server opens its own on its event loop)."""
    from perdure._gateway.ledger import open_ledger

    ledger = open_ledger(url)
    await ledger.open()
    await ledger.close()


def _run(resolved: str, listen: str, app: object, ready: Callable[[str], str]) -> None:
    """Check the ledger, bind ``listen``, serve ``app``; print ``ready(address)`` once
    it serves."""
    from perdure._gateway.serve import bind
    from perdure._gateway.serve import serve as run_server

    asyncio.run(_check_ledger(resolved))
    sock = bind(listen)
    run_server(app, sock, ready)


def serve(
    url: str | None,
    listen: str,
    upstreams: Sequence[str],
    retention: float,
    timeout: float,
    max_body: int,
    require_key: bool,
) -> None:
    _need_extra()
    from perdure._gateway.http import GatewaySettings, create_app
    from perdure._gateway.upstreams import parse_upstreams

    if not upstreams:
        raise CliError("give at least one --upstream NAME=URL", EXIT_CONFIG)
    resolved = resolve_url(url)
    settings = GatewaySettings(
        url=resolved,
        upstreams=parse_upstreams(upstreams),
        retention=retention,
        timeout=timeout,
        max_body=max_body,
        require_key=require_key,
    )
    names = ", ".join(f"/{n}/ -> {u}" for n, u in settings.upstreams.items())
    _run(
        resolved,
        listen,
        create_app(settings),
        lambda address: f"perdure gateway on {address} ({names}); ledger {mask_url(resolved)}",
    )


def _ago(at: float | None) -> str:
    if at is None:
        return ""
    seconds = max(0, int(time.time() - at))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


async def status(url: str | None, states: Sequence[str], limit: int, fmt: Format) -> int:
    from perdure._gateway.ledger import open_ledger
    from perdure._gateway.records import STATES

    wanted = [s.replace("-", "_") for s in states]
    for s in wanted:
        if s not in STATES:
            raise CliError(f"--state {s!r}: use one of {', '.join(STATES)}", EXIT_CONFIG)
    ledger = open_ledger(resolve_url(url))
    await ledger.open()
    try:
        attempts = await ledger.attempts([s for s in STATES if s in wanted] or None, limit)
    finally:
        await ledger.close()
    if fmt is Format.JSON:
        rows = [
            {
                "upstream": a.scope,
                "idempotency_key": a.key,
                "state": a.state,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
                "status": None if a.response is None else a.response.status,
                "owner": a.owner,
                "reason": a.reason,
                "expires_at": a.expires_at,
            }
            for a in attempts
        ]
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="perdure gateway", title_justify="left")
    for column in ("upstream", "idempotency key", "state", "started", "answer", "note"):
        table.add_column(column, overflow="fold")
    for a in attempts:
        state = "[bold red]unknown[/]" if a.state == "unknown" else a.state.replace("_", "-")
        answer = "" if a.response is None else str(a.response.status)
        table.add_row(a.scope, a.key, state, _ago(a.started_at), answer, a.reason or "")
    console = out()
    console.print(table)
    unknown = sum(1 for a in attempts if a.state == "unknown")
    console.print(f"{len(attempts)} attempts, {unknown} with an unknown outcome", markup=False)
    if unknown:
        console.print(
            "check each with its upstream; then `perdure gateway forget UPSTREAM KEY` lets "
            "the next retry through",
            markup=False,
        )
    return 0


async def forget(url: str | None, upstream: str, key: str) -> int:
    from perdure._gateway.ledger import open_ledger

    ledger = open_ledger(resolve_url(url))
    await ledger.open()
    try:
        gone = await ledger.forget(upstream, key)
    finally:
        await ledger.close()
    if not gone:
        raise CliError(f"the gateway ledger has no attempt {upstream}/{key}", EXIT_NOT_FOUND)
    err().print(f"forgot {upstream}/{key}: the next call with this key is forwarded", markup=False)
    return 0


def serve_mcp(
    url: str | None,
    listen: str,
    name: str,
    upstream: str | None,
    command: Sequence[str],
    read_only: Sequence[str],
    retention: float,
    timeout: float,
    require_key: bool,
) -> None:
    _need_extra("mcp")
    from mcp import StdioServerParameters

    from perdure._gateway.mcp_proxy import McpSettings, create_mcp_app

    if (upstream is None) == (not command):
        raise CliError("give the upstream MCP server: --upstream URL or -- COMMAND...", EXIT_CONFIG)
    target: str | StdioServerParameters
    if upstream is not None:
        from perdure._gateway.upstreams import check_url

        target = check_url(name, upstream)
    else:
        target = StdioServerParameters(command=command[0], args=list(command[1:]))
    resolved = resolve_url(url)
    settings = McpSettings(
        url=resolved,
        name=name,
        upstream=target,
        read_only=tuple(read_only),
        retention=retention,
        timeout=timeout,
        require_key=require_key,
    )
    shown = upstream if upstream is not None else " ".join(command)
    _run(
        resolved,
        listen,
        create_mcp_app(settings),
        lambda address: (
            f"perdure gateway (MCP {name}) on {address}/mcp -> {shown}; ledger {mask_url(resolved)}"
        ),
    )
