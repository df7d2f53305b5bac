"""SIGKILL a worker at each step boundary, resume in a new process, count effects outside.

The run ``refund`` does lookup → charge (receiver dedupes) → email (receiver does not)
→ done. The receiver holds a chosen request so the test kills the worker at an exact
point; a fresh ``perdure worker`` process then recovers the run.
"""

from __future__ import annotations

from typing import Any

from perdure import EventKind, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)


def completed_steps(history: list[Any]) -> list[str]:
    return [e.step_key for e in history if e.kind is EventKind.STEP_COMPLETED]


async def crash_at(
    receiver: Receiver, processes: Processes, name: str, point: str, run_id: str
) -> None:
    hold = receiver.hold(name, point)  # type: ignore[arg-type]
    driver = processes.drive("scenarios", "refund", "42", run_id=run_id)
    receiver.wait_held(hold)
    driver.kill()
    if point == "before":
        hold.drop()  # the request dies with its sender: nothing applied
    else:
        hold.release.set()


async def test_sigkill_before_a_step_resumes_without_repeating_earlier_steps(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    await crash_at(receiver, processes, "charge", "before", "r-before")
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-before", STOPPED)
    assert info.status is RunStatus.SUCCEEDED
    assert receiver.applied["lookup"] == 1  # recorded before the kill: replayed, not redone
    assert receiver.requests["charge"] == 2  # the killed attempt died mid-request
    assert receiver.applied["charge"] == 1
    assert receiver.applied["email"] == 1
    steps = completed_steps(await perdure_backend.history("r-before"))
    assert steps == ["1:lookup", "2:charge", "3:email", "4:done"]


async def test_sigkill_after_an_idempotent_effect_before_its_record_is_not_duplicated(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    await crash_at(receiver, processes, "charge", "after", "r-after-charge")
    assert receiver.applied["charge"] == 1  # the effect landed, the worker never heard
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-after-charge", STOPPED)
    assert info.status is RunStatus.SUCCEEDED
    assert receiver.requests["charge"] == 2  # retried after the crash ...
    assert receiver.applied["charge"] == 1  # ... with the same key, so applied once
    assert receiver.keys["charge"] == ["r-after-charge:2:charge"]
    assert receiver.applied["email"] == 1
    steps = completed_steps(await perdure_backend.history("r-after-charge"))
    assert steps == ["1:lookup", "2:charge", "3:email", "4:done"]


async def test_sigkill_after_a_non_idempotent_effect_parks_the_run_and_never_repeats_it(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    await crash_at(receiver, processes, "email", "after", "r-after-email")
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-after-email", STOPPED)
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["step_key"] == "3:email"
    assert info.attention["reason"] == "unknown-outcome"
    assert receiver.requests["email"] == 1  # never called again blindly

    # An operator checks the relay, sees the mail went out, and says so from the CLI.
    done = processes.cli(
        "reconcile",
        "r-after-email",
        "--step",
        "3:email",
        "--succeeded",
        "--result",
        '"email-1"',
        "--by",
        "ops",
    )
    assert done.returncode == 0, done.stderr
    info = await wait_for_status(
        perdure_backend, "r-after-email", (RunStatus.SUCCEEDED, RunStatus.FAILED)
    )
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == {"charge": "charge-1", "email": "email-1"}
    assert receiver.requests["email"] == 1
    assert receiver.applied["charge"] == 1


async def test_sigkill_after_a_step_record_resumes_at_the_next_step(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    await crash_at(receiver, processes, "done", "before", "r-after-record")
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-after-record", STOPPED)
    assert info.status is RunStatus.SUCCEEDED
    assert receiver.requests["charge"] == 1
    assert receiver.requests["email"] == 1
    assert receiver.applied["done"] == 1
    steps = completed_steps(await perdure_backend.history("r-after-record"))
    assert steps == ["1:lookup", "2:charge", "3:email", "4:done"]


async def test_two_workers_racing_to_recover_one_run_drive_it_once(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    await crash_at(receiver, processes, "lookup", "before", "r-race")
    processes.worker("scenarios")
    processes.worker("scenarios")
    info = await wait_for_status(perdure_backend, "r-race", STOPPED)
    assert info.status is RunStatus.SUCCEEDED
    assert receiver.applied["lookup"] == 1
    assert receiver.requests["charge"] == 1
    assert receiver.requests["email"] == 1
    assert receiver.applied["done"] == 1
    steps = completed_steps(await perdure_backend.history("r-race"))
    assert steps == ["1:lookup", "2:charge", "3:email", "4:done"]
