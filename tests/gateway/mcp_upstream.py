"""A small real MCP server (the ``mcp`` package's ``MCPServer``, streamable HTTP) for the
MCP proxy's tests. Its tools post to the test's receiver (``PERDURE_TEST_RECEIVER``),
which does not deduplicate, so calls are counted outside both servers.

Run as ``python mcp_upstream.py``: prints ``mcp upstream on http://HOST:PORT/mcp`` once
it listens.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from perdure._gateway.serve import bind, serve
from perdure.testing import post

server = MCPServer("mail")


def _receiver(path: str) -> str:
    return f"{os.environ['PERDURE_TEST_RECEIVER']}/plain/{path}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def send_mail(to: str) -> str:
    """Send one mail (a side effect the relay does not deduplicate)."""
    return str(post(_receiver("mcp_mail"), {"to": to})["id"])


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(order: str) -> str:
    """Read an order (read-only)."""
    return str(post(_receiver("mcp_lookup"), {"order": order})["id"])


@server.tool()
def archive(order: str) -> str:
    """Not annotated at all: the proxy treats it as side-effecting."""
    return str(post(_receiver("mcp_archive"), {"order": order})["id"])


if __name__ == "__main__":
    serve(server.streamable_http_app(), bind("127.0.0.1:0"), lambda a: f"mcp upstream on {a}/mcp")
