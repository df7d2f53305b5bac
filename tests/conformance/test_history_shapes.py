"""The history every backend records, pinned: event kinds, order, ``seq`` and data keys
(``perdure._semantics.events``), and the operator guards on an ended run."""

from __future__ import annotations

from typing import Any

import pytest

import perdure
from perdure import EventKind, InvalidRunStateError, RunFailedError, RunStatus
from perdure._records import Event

pytestmark = pytest.mark.perdure_memory


@perdure.step
async def double(n: int) -> int:
    return 2 * n


@perdure.step(retry=perdure.RetryPolicy(max_attempts=2, initial_interval=0.01))
async def refuse(n: int) -> int:
    raise ValueError(f"no {n}")


@perdure.workflow(name="shapes.ok")
async def ok_flow(n: int, *, label: str) -> dict[str, Any]:
    return {"label": label, "value": await double(n)}


@perdure.workflow(name="shapes.fail")
async def failing_flow(n: int) -> int:
    return await refuse(n)


def data_keys(history: list[Event], kind: EventKind) -> list[set[str]]:
    return [set(e.data) for e in history if e.kind is kind]


async def test_run_started_is_seq_0_with_args_and_kwargs(perdure_backend: Any) -> None:
    handle = await perdure_backend.start(ok_flow, (4,), {"label": "x"}, run_id="h-started")
    await handle.result(timeout=120)
    history = await handle.history()
    first = history[0]
    assert (first.seq, first.kind, first.step_key) == (0, EventKind.RUN_STARTED, None)
    assert first.data == {"args": [4], "kwargs": {"label": "x"}}
    assert [e.seq for e in history] == list(range(len(history)))


async def test_a_step_and_the_end_of_a_run_record_these_shapes(perdure_backend: Any) -> None:
    handle = await perdure_backend.start(ok_flow, (4,), {"label": "x"}, run_id="h-ok")
    assert await handle.result(timeout=120) == {"label": "x", "value": 8}
    history = await handle.history()
    (step,) = [e for e in history if e.kind is EventKind.STEP_COMPLETED]
    assert (step.step_key, step.name) == ("1:double", "double")
    assert set(step.data) == {"result", "attempt", "kind", "duration"}
    assert (step.data["result"], step.data["attempt"], step.data["kind"]) == (8, 1, "step")
    last = history[-1]
    assert last.kind is EventKind.RUN_SUCCEEDED and last.step_key is None
    assert last.data == {"result": {"label": "x", "value": 8}}
    assert [e.seq for e in history] == sorted(e.seq for e in history)


async def test_a_failed_step_records_its_attempts_and_fails_the_run_naming_it(
    perdure_backend: Any,
) -> None:
    handle = await perdure_backend.start(failing_flow, (3,), {}, run_id="h-fail")
    with pytest.raises(RunFailedError) as caught:
        await handle.result(timeout=120)
    history = await handle.history()
    assert data_keys(history, EventKind.ATTEMPT_FAILED) == [{"attempt", "error", "retry_in"}]
    (failed,) = [e for e in history if e.kind is EventKind.STEP_FAILED]
    assert failed.step_key == "1:refuse"
    assert failed.data == {
        "attempts": 2,
        "error": {"type": "ValueError", "message": "no 3"},
        "kind": "step",
    }
    assert history[-1].kind is EventKind.RUN_FAILED
    error = caught.value.error
    assert (error["step"], error["attempts"]) == ("1:refuse", 2)
    assert error["cause"] == {"type": "ValueError", "message": "no 3"}
    assert set(error) == {"type", "message", "step", "attempts", "cause"}


async def test_cancel_of_a_finished_run_raises_invalid_run_state(perdure_backend: Any) -> None:
    handle = await perdure_backend.start(ok_flow, (1,), {"label": "c"}, run_id="h-cancel")
    await handle.result(timeout=120)
    with pytest.raises(InvalidRunStateError, match="h-cancel"):
        await perdure_backend.cancel("h-cancel")
    assert (await perdure_backend.get_run("h-cancel")).status is RunStatus.SUCCEEDED


async def test_a_signal_to_a_finished_run_raises_invalid_run_state(perdure_backend: Any) -> None:
    handle = await perdure_backend.start(ok_flow, (1,), {"label": "s"}, run_id="h-signal")
    await handle.result(timeout=120)
    with pytest.raises(InvalidRunStateError, match="h-signal"):
        await perdure_backend.signal("h-signal", "approval", {"ok": True}, by="ops")
