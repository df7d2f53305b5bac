"""Which Temporal errors are ridden out, and that riding out resends one update."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

import perdure
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
