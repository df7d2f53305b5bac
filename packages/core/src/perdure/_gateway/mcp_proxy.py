"""The MCP proxy: an MCP server (streamable HTTP) that fronts one upstream MCP server
and applies the gateway's rule to ``tools/call``.

A call to a side-effecting tool that carries an idempotency key in its request
``_meta`` (``{"idempotency-key": KEY}``) reaches the upstream at most once: the attempt
is recorded in the ledger first (scope ``mcp:NAME``), the result (or the upstream's
JSON-RPC error) is stored, and a retry gets it back. A tool is side-effecting unless the
upstream annotates it ``readOnlyHint: true`` or ``read_only`` names it: nothing is guessed
safe; the proxy lists those with ``_meta["io.perdure/gateway"]``, which ``perdure
audit`` reads. Read-only tools and calls without a key pass through. When the proxy itself
answers (unknown outcome, key reused, ...), it is a JSON-RPC error whose ``data`` is the
same typed body the HTTP gateway sends (``{"error": "outcome_unknown", ...}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Collection
from dataclasses import dataclass, field
from typing import Any

from mcp import Client, StdioServerParameters, types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette

from perdure._audit_mcp import GATEWAY_META
from perdure._errors import PerdureError
from perdure._gateway.ledger import Ledger, open_ledger
from perdure._gateway.once import GatewayRefusal, Once
from perdure._gateway.records import StoredResponse, fingerprint
from perdure._gateway.upstreams import check_name
from perdure._semantics.unresolved import MCP_REFUSED

#: Where a caller puts the key: ``tools/call`` params ``_meta``.
META_KEY = "idempotency-key"
#: JSON-RPC error code of the proxy's own answers (application-defined range); a worker's
#: effect that gets ``outcome_unknown`` under it parks (``semantics.unresolved``).
REFUSED = MCP_REFUSED
#: ``StoredResponse.status`` of a stored result, and of a stored upstream error.
_RESULT, _ERROR = 200, 500


@dataclass(frozen=True)
class McpSettings:
    """What ``create_mcp_app`` serves. ``url`` is a perdure URL (the ledger's database)."""

    url: str
    name: str
    #: A streamable-HTTP URL, or a command to launch over stdio.
    upstream: str | StdioServerParameters
    #: Tools to treat as read-only although the upstream does not annotate them so.
    read_only: Collection[str] = ()
    retention: float = 24 * 3600.0
    lease: float = 30.0
    #: Refuse side-effecting calls without a key.
    require_key: bool = False
    timeout: float = 60.0

    def __post_init__(self) -> None:
        check_name(self.name)


@dataclass
class _State:
    client: Client
    once: Once
    read_only: set[str] = field(default_factory=lambda: set())
    listed: dict[str, bool] = field(default_factory=lambda: {})  # tool -> read-only


def create_mcp_app(settings: McpSettings, ledger: Ledger | None = None) -> Starlette:
    """The proxy as an ASGI app (its MCP endpoint is ``/mcp``)."""
    scope = f"mcp:{settings.name}"
    store = ledger or open_ledger(settings.url)

    @contextlib.asynccontextmanager
    async def lifespan(_server: Server[_State]) -> AsyncGenerator[_State]:
        await store.open()
        once = Once(store, retention=settings.retention, lease=settings.lease)
        once.wait_limit = settings.timeout + settings.lease
        try:
            async with Client(settings.upstream, read_timeout_seconds=settings.timeout) as client:
                state = _State(client, once, set(settings.read_only))
                await _relist(state)
                renew = asyncio.ensure_future(once.renew_forever())
                try:
                    yield state
                finally:
                    renew.cancel()
                    await once.drain()
        finally:
            await store.close()

    async def list_tools(
        ctx: ServerRequestContext[_State], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        state = ctx.lifespan_context
        result = await state.client.list_tools(cursor=None if params is None else params.cursor)
        _remember(state, result)
        # Say which tools this proxy deduplicates, so `perdure audit` can tell.
        tools = [
            t
            if state.listed[t.name] or t.name in state.read_only
            else t.model_copy(update={"meta": {**(t.meta or {}), GATEWAY_META: scope}})
            for t in result.tools
        ]
        return result.model_copy(update={"tools": tools})

    async def call_tool(
        ctx: ServerRequestContext[_State], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        state = ctx.lifespan_context
        meta: dict[str, Any] = dict(params.meta or {})
        key = meta.get(META_KEY)
        if params.name not in state.listed:
            await _relist(state)
        effect = not state.listed.get(params.name, False) and params.name not in state.read_only
        arguments = params.arguments

        async def forward() -> types.CallToolResult:
            return await state.client.call_tool(params.name, arguments, meta=params.meta)

        if not effect or key is None:
            if effect and settings.require_key:
                raise _refusal(
                    "idempotency_key_required",
                    f"{params.name!r} has side effects: send _meta {{{META_KEY!r}: KEY}}",
                )
            return await forward()

        async def send() -> StoredResponse:
            try:
                result = await forward()
            except MCPError as exc:  # the upstream answered: an error is its answer
                body = exc.error.model_dump_json(by_alias=True, exclude_none=True).encode()
                return StoredResponse(_ERROR, (), body, len(body))
            body = result.model_dump_json(by_alias=True, exclude_none=True).encode()
            return StoredResponse(_RESULT, (), body, len(body))

        call = json.dumps({"tool": params.name, "arguments": arguments}, sort_keys=True)
        try:
            reply = await state.once.call(scope, str(key), fingerprint(call), send)
        except GatewayRefusal as exc:
            raise MCPError(REFUSED, str(exc), exc.body()) from exc
        except PerdureError as exc:
            raise _refusal("ledger_unavailable", f"nothing was sent: {exc}") from exc
        stored = reply.response
        if stored.status == _ERROR:
            error = types.ErrorData.model_validate_json(stored.body or b"{}")
            raise MCPError.from_error_data(error)
        result = types.CallToolResult.model_validate_json(stored.body or b"{}")
        if reply.replayed:
            result.meta = {**(result.meta or {}), "idempotent-replayed": True}
        return result

    server: Server[_State] = Server(
        f"perdure-gateway:{settings.name}",
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    return server.streamable_http_app()


def _refusal(code: str, message: str) -> MCPError:
    return MCPError(REFUSED, message, {"error": code, "message": message})


def _remember(state: _State, result: types.ListToolsResult) -> None:
    for tool in result.tools:
        hints = tool.annotations
        state.listed[tool.name] = bool(hints is not None and hints.read_only_hint)


async def _relist(state: _State) -> None:
    """Every page of the upstream's tools, for their read-only annotations."""
    cursor: str | None = None
    while True:
        result = await state.client.list_tools(cursor=cursor)
        _remember(state, result)
        cursor = result.next_cursor
        if not cursor:
            return
