"""Which Temporal errors are ridden out, and that riding out resends one update."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

import perdure
from perdure._registry import open_backend
from perdure.testing.patience import Patience
from perdure_temporal.devserver import DevServer
from perdure_temporal.faults import is_transient, ride_out


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (WorkflowUpdateRPCTimeoutOrCancelledError(), True),
        (RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b""), True),
        (RPCError("deadline", RPCStatusCode.DEADLINE_EXCEEDED, b""), True),
        (
            RPCError(
                "Unable to query workflow due to Workflow Task in failed state.",
                RPCStatusCode.FAILED_PRECONDITION,
                b"",
            ),
            True,
        ),
        (RPCError("workflow is not ready", RPCStatusCode.FAILED_PRECONDITION, b""), True),
        (RPCError("namespace not found", RPCStatusCode.NOT_FOUND, b""), False),
        (RPCError("bad request", RPCStatusCode.INVALID_ARGUMENT, b""), False),
        (RPCError("no such thing", RPCStatusCode.FAILED_PRECONDITION, b""), False),
        # What Client.connect raises while nothing listens at the address (a restart).
        (
            RuntimeError(
                "Failed client connect: Server connection error: tonic::transport::Error("
                'Transport, ConnectError(ConnectError("tcp connect error", 127.0.0.1:7233, '
                'Os { code: 111, kind: ConnectionRefused, message: "Connection refused" })))'
            ),
            True,
        ),
        (RuntimeError("Failed client connect: invalid peer certificate: UnknownIssuer"), False),
        (RuntimeError("Failed client connect: Request unauthorized."), False),
        (RuntimeError("connection refused by user code"), False),
        (ValueError("user code"), False),
    ],
)
def test_transient_temporal_states_are_told_from_real_errors(
    exc: BaseException, transient: bool
) -> None:
    assert is_transient(exc) is transient


async def test_a_transient_state_is_retried_until_the_call_succeeds() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise WorkflowUpdateRPCTimeoutOrCancelledError()
        return "done"

    assert await ride_out("append", flaky) == "done"
    assert calls == 4


async def test_a_state_that_does_not_pass_is_backend_unavailable_naming_the_call() -> None:
    async def down() -> None:
        raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")

    with pytest.raises(perdure.BackendUnavailableError, match="append of run 'r'"):
        await ride_out("append of run 'r'", down, budget=0.3)


async def test_a_real_error_is_raised_at_once() -> None:
    calls = 0

    async def wrong() -> None:
        nonlocal calls
        calls += 1
        raise RPCError("bad request", RPCStatusCode.INVALID_ARGUMENT, b"")

    with pytest.raises(RPCError):
        await ride_out("append", wrong)
    assert calls == 1


async def test_a_backend_opened_while_the_server_is_down_waits_for_it_and_runs(
    tmp_path: Path, flows: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker or an application starting while its Temporal server restarts (or is
    not up yet) connects once the server answers, rather than exit with the refusal."""
    server = DevServer(db_file=tmp_path / "temporal.db")  # on its port, not started
    tag = uuid.uuid4().hex[:12]
    url = server.url(task_queue=f"t-{tag}", id_prefix=f"{tag}-", payloads=str(tmp_path / "p"))
    backend = open_backend(url)
    caplog.set_level(logging.INFO, logger="perdure.temporal")
    opening = asyncio.ensure_future(backend.open())
    try:
        patience = Patience(60)
        while not any("connect to Temporal" in r.getMessage() for r in caplog.records):
            assert not opening.done(), opening.exception()  # refused: it must not give up
            assert not patience.expired(), "no connection was tried"
            await asyncio.sleep(0.02)  # the poll's pace; the log line ends it
        await asyncio.to_thread(server.start)
        await opening
        handle = await backend.start(flows.big_results, (2, 1), {}, run_id="after")
        assert await handle.result() == 2 * 1024
    finally:
        opening.cancel()
        await backend.close()
        await asyncio.to_thread(server.stop)
