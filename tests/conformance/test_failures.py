"""Transient and permanent step failures, long histories and large payloads."""

from __future__ import annotations

from typing import Any

import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)


@pytest.fixture
def scenarios(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import scenarios

    return scenarios


async def test_transient_failures_retry_the_step_without_redoing_earlier_steps(
    perdure_backend: Any, receiver: Receiver, scenarios: Any
) -> None:
    receiver.fail_next("ledger", 2)
    handle = await perdure_backend.start(scenarios.flaky_refund, ("5",), {}, run_id="r-flaky")
    assert await handle.result() == "ledger-1"
    assert receiver.requests["ledger"] == 3
    assert receiver.applied["lookup"] == 1
    history = await perdure_backend.history("r-flaky")
    failed = [e.data["attempt"] for e in history if e.kind is EventKind.ATTEMPT_FAILED]
    assert failed == [1, 2]


async def test_a_permanent_failure_fails_the_run_with_step_attempts_and_error(
    perdure_backend: Any, receiver: Receiver, scenarios: Any
) -> None:
    receiver.fail_next("ledger", 10)
    handle = await perdure_backend.start(scenarios.flaky_refund, ("6",), {}, run_id="r-perm")
    with pytest.raises(perdure.RunFailedError) as failure:
        await handle.result()
    error = failure.value.error
    assert error["step"] == "2:flaky"
    assert error["attempts"] == 4
    assert error["cause"]["type"] == "ConnectionError"
    assert receiver.requests["ledger"] == 4
    assert receiver.applied["lookup"] == 1
    info = await perdure_backend.get_run("r-perm")
    assert info.status is RunStatus.FAILED


async def test_a_thousand_step_run_resumes_after_sigkill_without_reexecuting(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    steps_total = 1000
    # Time proportional to the work: a backend may spend tens of ms per durable step
    # (DBOS does), slower still when the suite runs in parallel.
    budget = 60.0 + 0.1 * steps_total
    hold = receiver.hold("long-end", "before")
    driver = processes.drive("scenarios", "long", steps_total, run_id="r-long")
    receiver.wait_held(hold, timeout=budget)
    driver.kill()
    hold.drop()
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-long", ENDED, timeout=budget)
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == sum(range(steps_total))
    history = await perdure_backend.history("r-long")
    steps = [e.step_key for e in history if e.kind is EventKind.STEP_COMPLETED]
    assert len(steps) == steps_total
    assert len(set(steps)) == steps_total


async def test_a_5mb_step_result_survives_a_process_exit(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    size = 5 * 1024 * 1024
    first = processes.drive("scenarios", "large", size, run_id="r-large")
    assert first.wait() == 0, first.output()
    signalled = processes.cli("signal", "r-large", "go", "--by", "ops")
    assert signalled.returncode == 0, signalled.stderr
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-large", ENDED)
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == size
