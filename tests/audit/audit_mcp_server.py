"""A small real MCP server over stdio for ``perdure audit``'s live listing: one tool
annotated read-only, one annotated as having effects, one not annotated at all."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("files")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_file(path: str) -> str:
    """Read a file (read-only)."""
    return path


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_file(path: str) -> str:
    """Delete a file."""
    return path


@server.tool()
def touch(path: str) -> str:
    """Not annotated."""
    return path


if __name__ == "__main__":
    server.run()
