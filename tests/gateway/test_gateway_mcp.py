"""The MCP proxy (``perdure gateway mcp``) in front of a small real MCP server, both in
subprocesses; tool calls are counted at the receiver the upstream's tools post to."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gateway_support import first_line
from mcp import Client
from mcp.shared.exceptions import MCPError

from perdure._semantics.unresolved import unresolved_outcome
from perdure.testing import Processes, Receiver

pytestmark = pytest.mark.perdure_only(
    "sqlite", "postgresql", reason="the gateway's ledger lives in a SQLite or PostgreSQL store"
)

UPSTREAM = Path(__file__).with_name("mcp_upstream.py")


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def _start(processes: Processes, upstream: str) -> tuple[Any, str]:
    proc = processes.spawn(
        "-m",
        "perdure",
        "gateway",
        "mcp",
        "--name",
        "mail",
        "--upstream",
        upstream,
        "--listen",
        "127.0.0.1:0",
        "--url",
        processes.url,
    )
    line = first_line(proc, " on http://")
    return proc, line.split(" on ", 1)[1].split()[0]


async def test_the_mcp_proxy_sends_a_side_effecting_call_once_per_key(
    receiver: Receiver, processes: Processes, tmp_path: Path
) -> None:
    upstream = first_line(processes.spawn(str(UPSTREAM)), "mcp upstream on ")
    upstream_url = upstream.split(" on ", 1)[1].strip()
    proxy, url = _start(processes, upstream_url)
    key = {"idempotency-key": "mail-1"}

    async with Client(url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"send_mail", "lookup", "archive"}  # listed through the proxy

        first = await client.call_tool("send_mail", {"to": "ada"}, meta=key)
        again = await client.call_tool("send_mail", {"to": "ada"}, meta=key)
        assert _text(first) == _text(again) == "mcp_mail-1"
        assert (again.meta or {}).get("idempotent-replayed") is True
        assert receiver.requests["mcp_mail"] == 1

        # Concurrent duplicates: one reaches the upstream.
        hold = receiver.hold("mcp_archive", "before")
        calls = [
            asyncio.ensure_future(
                client.call_tool("archive", {"order": "7"}, meta={"idempotency-key": "arch-7"})
            )
            for _ in range(3)
        ]
        await asyncio.to_thread(receiver.wait_held, hold)
        hold.release.set()
        answers = await asyncio.gather(*calls)
        assert {_text(a) for a in answers} == {"mcp_archive-1"}
        assert receiver.requests["mcp_archive"] == 1  # not annotated: side-effecting

        # A read-only tool, and a call without a key, pass through every time.
        await client.call_tool("lookup", {"order": "7"}, meta={"idempotency-key": "look"})
        await client.call_tool("lookup", {"order": "7"}, meta={"idempotency-key": "look"})
        assert receiver.requests["mcp_lookup"] == 2
        await client.call_tool("send_mail", {"to": "bob"})
        assert receiver.requests["mcp_mail"] == 2

        # The key reused for other arguments is refused with a typed error.
        with pytest.raises(MCPError) as refused:
            await client.call_tool("send_mail", {"to": "eve"}, meta=key)
        assert refused.value.data["error"] == "idempotency_key_reused"
        assert unresolved_outcome(refused.value) is None  # refused, but no unknown outcome
        assert receiver.requests["mcp_mail"] == 2

    # `perdure audit`, listing the proxy live, says which tools it deduplicates.
    (tmp_path / "pyproject.toml").write_text(f'[tool.perdure.mcp]\nmail = "{url}"\n')
    listed = subprocess.run(
        [sys.executable, "-m", "perdure", "audit", "--format", "json"],
        cwd=tmp_path,
        env=processes.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    policies = {
        e["name"]: (e["policy"], e["declared_by"]) for e in json.loads(listed.stdout)["entries"]
    }
    assert policies == {
        "mail.send_mail": ("effect-idempotent", "perdure gateway mcp:mail"),
        "mail.archive": ("effect-idempotent", "perdure gateway mcp:mail"),
        "mail.lookup": ("step", "MCP readOnlyHint"),
    }

    # A proxy killed mid-call: after a restart the outcome is reported unknown, not re-sent.
    hold = receiver.hold("mcp_mail", "after")

    async def lose() -> None:
        async with Client(url) as client:
            await client.call_tool("send_mail", {"to": "zed"}, meta={"idempotency-key": "mail-z"})

    lost = asyncio.ensure_future(lose())
    await asyncio.to_thread(receiver.wait_held, hold)
    proxy.kill()
    hold.release.set()
    with pytest.raises(Exception):  # noqa: B017 - the client's transport error, whichever
        await lost
    _, url = _start(processes, upstream_url)
    async with Client(url) as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("send_mail", {"to": "zed"}, meta={"idempotency-key": "mail-z"})
    assert unknown.value.data["error"] == "outcome_unknown"
    assert unknown.value.data["upstream"] == "mcp:mail"
    # What the client raised parks a worker's effect at its step, as the HTTP 409 does.
    assert "MCP proxy answered outcome_unknown" in (unresolved_outcome(unknown.value) or "")
    assert receiver.requests["mcp_mail"] == 3  # the lost call reached it once, never again
