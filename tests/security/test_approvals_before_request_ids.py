"""The upgrade path of a run that suspended on ``wait_for_signal("approval")`` before
approvals had request ids: its stored ``waiting_for`` is the bare ``approval``. Such a
run takes no answer (no approval can be bound to a request that has no id); the
refusal says to ``perdure resume`` it, which re-asks the approval with its request id,
and that request is then answered as any other.

Only the embedded SQL stores kept runs from before the upgrade, so the old row is
made there, by SQL on the store's own table.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import psycopg.sql
import pytest

import perdure
from perdure import RunStatus
from perdure._errors import ApprovalNotPendingError
from perdure._registry import open_backend
from perdure._semantics import approvals
from perdure.testing import Processes, wait_for_request
from perdure.testing.plugin import store_factory, store_names

EMBEDDED = [name for name in store_names() if name in ("sqlite", "postgresql")]


@perdure.workflow(name="security.legacy_refund")
async def legacy_refund(order: str) -> Any:
    return await perdure.wait_for_signal(perdure.APPROVAL, details={"tool": "refund"})


def _as_before_request_ids(url: str, run_id: str) -> None:
    """Store the run's wait as the code before request ids stored it."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute("UPDATE runs SET waiting_for = 'approval' WHERE run_id = ?", (run_id,))
        return
    parts = urlsplit(url)
    schema = parse_qs(parts.query).get("schema", ["public"])[0]
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("UPDATE {}.runs SET waiting_for = 'approval' WHERE run_id = %s").format(
                psycopg.sql.Identifier(schema)
            ),
            (run_id,),
        )


@pytest.mark.parametrize("store", EMBEDDED)
async def test_a_wait_from_before_request_ids_is_answered_after_resume(
    store: str, tmp_path: Path
) -> None:
    with store_factory(store)(tmp_path) as url:
        backend = open_backend(url)
        await backend.open()
        try:
            await _upgrade_path(backend, url, Processes(url, cwd=tmp_path))
        finally:
            await backend.close()


async def _upgrade_path(backend: Any, url: str, processes: Processes) -> None:
    await backend.start(legacy_refund, ("o-1",), {}, run_id="legacy-1")
    request = await wait_for_request(backend, "legacy-1", timeout=120)
    _as_before_request_ids(url, "legacy-1")
    old = await backend.get_run("legacy-1")
    assert (old.status, old.waiting_for, old.request_id) == (RunStatus.SUSPENDED, "approval", None)

    refused = await asyncio.to_thread(processes.cli, "approve", "legacy-1", "--by", "ann")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "perdure resume" in refused.stderr
    for name in (perdure.APPROVAL, approvals.channel(request)):
        with pytest.raises(ApprovalNotPendingError, match="before approvals had"):
            await backend.signal("legacy-1", name, {"approved": True}, by="ann")

    resumed = await asyncio.to_thread(processes.cli, "resume", "legacy-1", "--by", "ann")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # This process drives the resumed run when it is due: it asks again, with an id.
    finished = asyncio.ensure_future(backend.wait("legacy-1", timeout=300))
    assert await wait_for_request(backend, "legacy-1", timeout=120) == request
    approved = await asyncio.to_thread(processes.cli, "approve", "legacy-1", "--by", "ann")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert f"approved request {request}" in approved.stdout
    info = await finished
    assert info.status is RunStatus.SUCCEEDED
    assert perdure._backend.outcome(info) == {"approved": True, "message": None}
