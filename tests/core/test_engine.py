"""The run semantics (``perdure._semantics``), scenario by scenario, on every column.

Each test runs on every backend ``PERDURE_TEST_STORES`` names, plus the in-memory
store as a fast extra column; a second backend opened on the same URL stands in for a
new process. Tests that fabricate a history through the ``Store`` API (a crash after an
intent, a takeover mid-step) run on the columns that are a ``Store`` under the embedded
engine. Synchronisation is always by awaiting the engine (``handle.result()``,
``backend.wait()``, ``backend.idle()``) or a gate a step waits on, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import engine_workflows as ew
import pytest
from engine_workflows import CALLS, SEEN

import perdure
from perdure import (
    DeterminismError,
    EventKind,
    InvalidRunStateError,
    LeaseLostError,
    NeedsAttentionError,
    RunCancelledError,
    RunFailedError,
    RunHandle,
    RunNotFoundError,
    RunStatus,
    SerializationError,
)
from perdure._backend import Backend
from perdure._engine.backend import EmbeddedBackend
from perdure._records import Event, NewEvent, RunInfo
from perdure._registry import open_backend
from perdure._semantics.events import encode_input
from perdure._store import NewRun, Store
from perdure._workflow import Workflow, get_workflow, register_workflow, registered_workflows

MakeBackend = Callable[[], Backend]

pytestmark = pytest.mark.perdure_memory

#: A durable wait long enough that a loaded machine still sees the run suspended
#: (it is read back right after the drive stops), short enough to keep tests quick.
WAIT = 2.0


# -- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_counters_and_registry() -> Iterator[None]:
    ew.reset()
    saved = {name: get_workflow(name) for name in registered_workflows()}
    yield
    for wf in saved.values():
        register_workflow(wf)
    ew.reset()


#: Columns without a perdure ``Store``: a test that writes a history through one
#: (``store``) cannot be expressed there.
NO_STORE = ("dbos+sqlite", "dbos+postgresql", "temporal")
needs_store = pytest.mark.perdure_not_on(
    *NO_STORE, reason="DBOS and Temporal are Backends: they keep no perdure Store"
)


@pytest.fixture
async def make_backend(perdure_url: str) -> AsyncIterator[MakeBackend]:
    made: list[Backend] = []

    def make() -> Backend:
        backend = open_backend(perdure_url)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()


@pytest.fixture
async def backend(make_backend: MakeBackend) -> Backend:
    backend = make_backend()
    await backend.open()
    return backend


@pytest.fixture
def store(backend: Backend) -> Store:
    """The column's ``Store`` (``needs_store`` tests only)."""
    assert isinstance(backend, EmbeddedBackend), "mark the test needs_store"
    return backend.store


async def settle(backend: Backend, run_id: str) -> RunInfo:
    """Let every drive in ``backend`` reach its next stop; return the run then."""
    await backend.idle()
    return await backend.get_run(run_id)


def of_kind(history: list[Event], kind: EventKind) -> list[Event]:
    return [ev for ev in history if ev.kind is kind]


def keys(history: list[Event], kind: EventKind) -> list[str | None]:
    return [ev.step_key for ev in of_kind(history, kind)]


async def crashed_after_intent(
    store: Store, workflow: Workflow[..., Any], run_id: str, key: str, args: tuple[Any, ...]
) -> None:
    """A run whose worker recorded the effect's intent, then died (its lease has expired)."""
    new = NewRun(run_id, workflow.name, encode_input(run_id, args, {}))
    _, lease = await store.create_run(new, "dead-worker", lease_seconds=0.0)
    assert lease is not None
    intent = NewEvent(EventKind.INTENT, key, key.partition(":")[2], {"attempt": 1})
    await store.append(lease, [intent], lease_seconds=0.0)


# -- happy path --------------------------------------------------------------------------


async def test_durable_result_equals_calling_the_workflow_plainly(
    backend: Backend,
) -> None:
    assert isinstance(ew.arithmetic, perdure.Workflow)
    plain = await ew.arithmetic(2, 3)  # outside a run the decorators are transparent
    assert dict(CALLS) == {"add": 1, "mul": 1, "square": 1, "halve": 1}

    handle = await backend.start(ew.arithmetic, (2, 3), {}, run_id="happy")
    assert await handle.result() == plain == {"sum": 5, "double": 10, "square": 100, "half": 50.0}
    assert dict(CALLS) == {"add": 2, "mul": 2, "square": 2, "halve": 2}
    info = await handle.info()
    assert info.status is RunStatus.SUCCEEDED
    history = await handle.history()
    assert history[0].kind is EventKind.RUN_STARTED
    assert history[-1].kind is EventKind.RUN_SUCCEEDED


async def test_sync_async_and_run_step_steps_are_recorded_under_their_names(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.arithmetic, (1, 1), {}, run_id="kinds")
    await handle.result()
    completed = of_kind(await handle.history(), EventKind.STEP_COMPLETED)
    # add: async @step; mul: sync @step; square: sync run_step; halve: async run_step
    assert [ev.step_key for ev in completed] == ["1:add", "2:mul", "3:square", "4:halve"]
    assert [ev.data["result"] for ev in completed] == [2, 4, 16, 8.0]
    assert all(ev.data["kind"] == "step" and ev.data["attempt"] == 1 for ev in completed)


async def test_start_rejects_unserializable_input_before_creating_a_run(
    backend: Backend,
) -> None:
    with pytest.raises(SerializationError, match="input of run 'bad-input'"):
        await backend.start(ew.arithmetic, (object(), 1), {}, run_id="bad-input")
    with pytest.raises(RunNotFoundError):
        await backend.get_run("bad-input")


# -- record once, replay forever ---------------------------------------------------------


async def test_steps_before_a_wait_are_replayed_not_re_executed_by_a_new_backend(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    await first.start(ew.approval_flow, (5,), {}, run_id="rec")
    info = await settle(first, "rec")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "approval"
    assert dict(CALLS) == {"fetch": 1, "think": 1}

    second = make_backend()  # a new process over the same database
    await second.signal("rec", "approval", {"ok": True}, by="alice")
    result = await RunHandle(second, "rec").result()

    assert result == {
        "fetched": {"n": 5, "items": [5, 6]},
        "thought": 11,
        "decision": {"ok": True},
        "done": "finished:approved",
    }
    assert dict(CALLS) == {"fetch": 1, "think": 1, "finish": 1}
    history = await second.history("rec")
    assert keys(history, EventKind.STEP_COMPLETED) == ["1:fetch", "2:think", "4:finish"]
    (received,) = of_kind(history, EventKind.SIGNAL_RECEIVED)
    assert received.step_key == "3:signal:approval"
    assert received.data["payload"] == {"ok": True}
    assert received.data["sent_by"] == "alice"


# -- idempotency keys --------------------------------------------------------------------


async def test_idempotency_key_is_run_id_and_step_key_and_stable_across_retries(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.key_flow, (7,), {}, run_id="keys")
    result = await handle.result()
    assert result["charged"] == 7
    # charge_card (sync, in a thread) failed once and was retried with the same key
    assert SEEN["charge_card"] == ["keys:1:charge_card", "keys:1:charge_card"]
    assert SEEN["notify"] == ["keys:2:notify"]
    assert keys(await handle.history(), EventKind.ATTEMPT_FAILED) == ["1:charge_card"]


async def test_idempotency_key_outside_a_run_is_a_fresh_random_key() -> None:
    a, b = perdure.idempotency_key(), perdure.idempotency_key()
    assert a != b
    assert len(a) == 32 and int(a, 16) >= 0
    assert await ew.notify("hi") == "hi"  # an effect called plainly gets one too
    (key,) = SEEN["notify"]
    assert len(key) == 32 and ":" not in key


async def test_idempotency_key_in_the_workflow_body_raises_perdure_error(
    backend: Backend,
) -> None:
    result = await (await backend.start(ew.key_flow, (1,), {}, run_id="body")).result()
    assert result["body_error"] is not None
    assert "workflow body" in result["body_error"] and "'body'" in result["body_error"]


# -- retries and failures ----------------------------------------------------------------


async def test_transient_failures_are_retried_and_recorded_as_attempt_failed(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.flaky_flow, (), {}, run_id="flaky")
    assert await handle.result() == ["ready", "ok"]
    assert CALLS["prepare"] == 1  # the earlier step was not redone
    assert CALLS["flaky"] == 3
    history = await handle.history()
    attempts = of_kind(history, EventKind.ATTEMPT_FAILED)
    assert [ev.step_key for ev in attempts] == ["2:flaky", "2:flaky"]
    assert [ev.data["attempt"] for ev in attempts] == [1, 2]
    assert [ev.data["error"]["type"] for ev in attempts] == ["ConnectionError"] * 2
    (done,) = [ev for ev in of_kind(history, EventKind.STEP_COMPLETED) if ev.step_key == "2:flaky"]
    assert done.data["attempt"] == 3


async def test_exhausted_retries_fail_the_run_with_step_attempts_and_error(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.exhausted_flow, (), {}, run_id="exhausted")
    with pytest.raises(RunFailedError) as caught:
        await handle.result()
    error = caught.value.error
    assert error["step"] == "2:always_fails"
    assert error["attempts"] == 3
    assert error["cause"] == {"type": "ValueError", "message": "boom"}
    assert CALLS["prepare"] == 1 and CALLS["always_fails"] == 3
    history = await handle.history()
    assert keys(history, EventKind.ATTEMPT_FAILED) == ["2:always_fails"] * 2
    (failed,) = of_kind(history, EventKind.STEP_FAILED)
    assert failed.data["attempts"] == 3
    assert history[-1].kind is EventKind.RUN_FAILED
    assert (await handle.status()) is RunStatus.FAILED


async def test_permanent_error_fails_the_run_after_one_attempt(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.permanent_flow, (), {}, run_id="permanent")
    with pytest.raises(RunFailedError) as caught:
        await handle.result()
    assert caught.value.error["step"] == "2:declines"
    assert caught.value.error["attempts"] == 1
    assert caught.value.error["cause"]["type"] == "PermanentError"
    assert "card declined" in str(caught.value)
    assert CALLS["declines"] == 1
    assert of_kind(await handle.history(), EventKind.ATTEMPT_FAILED) == []


async def test_workflow_catching_step_failed_error_continues_and_replays_it_identically(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    await first.start(ew.recovering_flow, (), {}, run_id="recover")
    assert (await settle(first, "recover")).status is RunStatus.SUSPENDED
    second = make_backend()
    await second.signal("recover", "go", "yes")
    result = await RunHandle(second, "recover").result()
    caught = {"step": "2:declines", "attempts": 1, "type": "PermanentError"}
    assert result == {"caught": caught, "decision": "yes", "done": "finished:recovered"}
    assert CALLS["declines"] == 1  # the failure was replayed, not re-executed
    assert SEEN["recovering_caught"] == [caught, caught]


# -- serialization through the engine ----------------------------------------------------


async def test_unserializable_step_result_fails_that_step_with_serialization_error(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.unstorable_flow, (), {}, run_id="unstorable")
    result = await handle.result()
    assert result["step"] == "1:unstorable"
    assert result["type"] == "SerializationError"
    assert "SerializationError" in result["message"] and "builtins.object" in result["message"]
    (failed,) = of_kind(await handle.history(), EventKind.STEP_FAILED)
    assert failed.step_key == "1:unstorable"
    assert failed.data["error"]["type"] == "SerializationError"


async def test_unserializable_workflow_result_fails_the_run(backend: Backend) -> None:
    handle = await backend.start(ew.unstorable_result_flow, (), {}, run_id="bad-result")
    with pytest.raises(RunFailedError, match="SerializationError"):
        await handle.result()


async def test_dataclass_and_pydantic_results_round_trip_through_replay(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    await first.start(ew.typed_flow, (), {}, run_id="typed")
    assert (await settle(first, "typed")).status is RunStatus.SUSPENDED
    second = make_backend()
    await second.signal("typed", "go")
    result = await RunHandle(second, "typed").result()

    assert dict(CALLS) == {"make_point": 1, "make_route": 1, "make_card": 1}
    ((point, route, card),) = SEEN["typed"]  # the values the replay handed the workflow
    expected_route = ew.Route("loop", [ew.Point(0, 0), ew.Point(3, 4)], origin=ew.Point(9, 9))
    for got in (point, result["point"]):
        assert type(got) is ew.Point and got == ew.Point(1, 2)
    for got in (route, result["route"]):
        assert type(got) is ew.Route and got == expected_route
        assert all(type(stop) is ew.Point for stop in got.stops)
    for got in (card, result["card"]):
        assert type(got) is ew.Card and got == ew.Card(holder="Ada", amount=12.5, tags=["vip"])


# -- intent before action ----------------------------------------------------------------


@needs_store
async def test_an_intent_without_outcome_parks_the_run_without_calling_the_effect(
    store: Store, backend: Backend
) -> None:
    await crashed_after_intent(store, ew.pay_flow, "intent", "1:charge", (5,))
    info = await backend.wait("intent")
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "unknown-outcome"
    assert info.attention["step_key"] == "1:charge"
    assert info.attention["arguments"] == {"args": [5], "kwargs": {}}
    with pytest.raises(NeedsAttentionError) as caught:
        await RunHandle(backend, "intent").result()
    assert caught.value.step_key == "1:charge"
    assert "1:charge" in str(caught.value)
    assert CALLS["charge"] == 0
    assert keys(await backend.history("intent"), EventKind.NEEDS_ATTENTION) == ["1:charge"]


@needs_store
async def test_reconciled_success_finishes_the_run_with_that_result_without_calling(
    store: Store, backend: Backend
) -> None:
    await crashed_after_intent(store, ew.pay_flow, "recon-ok", "1:charge", (5,))
    assert (await backend.wait("recon-ok")).status is RunStatus.NEEDS_ATTENTION
    await backend.reconcile(
        "recon-ok",
        "1:charge",
        "succeeded",
        result={"charged": 5},
        by="ops@example.com",
        message="seen in the gateway dashboard",
    )
    info = await backend.wait("recon-ok")
    assert info.status is RunStatus.SUCCEEDED
    assert await RunHandle(backend, "recon-ok").result() == {"paid": {"charged": 5}}
    assert CALLS["charge"] == 0
    (reconciled,) = of_kind(await backend.history("recon-ok"), EventKind.RECONCILED)
    assert reconciled.step_key == "1:charge"
    assert reconciled.data["outcome"] == "succeeded"
    assert reconciled.data["by"] == "ops@example.com"


@needs_store
async def test_reconciled_retry_calls_the_effect_once_with_the_same_key(
    store: Store, backend: Backend
) -> None:
    await crashed_after_intent(store, ew.pay_flow, "recon-retry", "1:charge", (5,))
    assert (await backend.wait("recon-retry")).status is RunStatus.NEEDS_ATTENTION
    await backend.reconcile("recon-retry", "1:charge", "retry", by="ops")
    assert await RunHandle(backend, "recon-retry").result() == {"paid": {"charged": 5}}
    assert CALLS["charge"] == 1
    assert SEEN["charge"] == ["recon-retry:1:charge"]


@needs_store
async def test_reconciled_failure_raises_step_failed_error_in_the_workflow(
    store: Store, backend: Backend
) -> None:
    await crashed_after_intent(store, ew.pay_flow, "recon-fail", "1:charge", (5,))
    assert (await backend.wait("recon-fail")).status is RunStatus.NEEDS_ATTENTION
    await backend.reconcile(
        "recon-fail", "1:charge", "failed", message="card was not charged", by="ops"
    )
    result = await RunHandle(backend, "recon-fail").result()
    assert result == {"failed": "1:charge", "type": "Reconciled", "message": "card was not charged"}
    assert CALLS["charge"] == 0


@needs_store
async def test_reconcile_of_a_step_that_is_not_parked_is_rejected(
    store: Store, backend: Backend
) -> None:
    await crashed_after_intent(store, ew.pay_flow, "recon-wrong", "1:charge", (5,))
    await backend.wait("recon-wrong")
    with pytest.raises(InvalidRunStateError, match="2:other"):
        await backend.reconcile("recon-wrong", "2:other", "retry", by="ops")
    with pytest.raises(InvalidRunStateError, match="reconcile"):
        await backend.resume("recon-wrong")  # resume would call the effect blindly
    assert (await backend.get_run("recon-wrong")).status is RunStatus.NEEDS_ATTENTION


@needs_store
async def test_idempotent_receiver_retries_an_open_intent_with_the_same_key(
    store: Store, backend: Backend
) -> None:
    await crashed_after_intent(store, ew.pay_dedup_flow, "dedup", "1:charge_dedup", (5,))
    assert await RunHandle(backend, "dedup").result() == {"charged": 5}
    assert CALLS["charge_dedup"] == 1
    assert SEEN["charge_dedup"] == ["dedup:1:charge_dedup"]


async def test_outcome_unknown_from_a_non_idempotent_effect_parks_the_run(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.pay_unknown_flow, (9,), {}, run_id="unknown")
    with pytest.raises(NeedsAttentionError) as caught:
        await handle.result()
    assert caught.value.step_key == "1:charge_unknown"
    assert CALLS["charge_unknown"] == 1  # not retried blindly
    info = await handle.info()
    assert info.attention is not None and "gateway timed out" in info.attention["message"]
    history = await handle.history()
    assert keys(history, EventKind.INTENT) == ["1:charge_unknown"]
    assert of_kind(history, EventKind.ATTEMPT_FAILED) == []

    await backend.reconcile("unknown", "1:charge_unknown", "retry", by="ops")
    assert await handle.result() == {"charged": 9}
    assert CALLS["charge_unknown"] == 2


async def test_outcome_unknown_from_an_idempotent_effect_is_retried_with_the_same_key(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.pay_unknown_dedup_flow, (3,), {}, run_id="unknown-dedup")
    assert await handle.result() == {"charged": 3}
    assert SEEN["charge_unknown_dedup"] == ["unknown-dedup:1:charge_unknown_dedup"] * 2
    assert keys(await handle.history(), EventKind.ATTEMPT_FAILED) == ["1:charge_unknown_dedup"]


# -- signals -----------------------------------------------------------------------------


async def test_signals_sent_before_the_wait_are_consumed_in_order_without_suspending(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.early_signal_flow, (), {}, run_id="early")
    await ew.gate("early:started").wait()  # the run is inside its first step
    await backend.signal("early", "go", {"n": 1}, by="bob")
    await backend.signal("early", "go", {"n": 2}, by="carol")
    ew.gate("early").set()
    assert await handle.result() == [{"n": 1}, {"n": 2}]
    history = await handle.history()
    assert of_kind(history, EventKind.SUSPENDED) == []
    received = of_kind(history, EventKind.SIGNAL_RECEIVED)
    assert [ev.step_key for ev in received] == ["2:signal:go", "3:signal:go"]
    assert [ev.data["payload"] for ev in received] == [{"n": 1}, {"n": 2}]
    assert [ev.data["sent_by"] for ev in received] == ["bob", "carol"]


async def test_wait_for_signal_with_zero_timeout_raises_signal_timeout_error(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.timeout_flow, (0,), {}, run_id="timeout0")
    assert await handle.result() == {"timed_out": "never"}
    (received,) = of_kind(await handle.history(), EventKind.SIGNAL_RECEIVED)
    assert received.data["timed_out"] is True


async def test_wait_for_signal_timeout_suspends_then_raises_signal_timeout_error(
    backend: Backend,
) -> None:
    started = time.time()
    handle = await backend.start(ew.timeout_flow, (WAIT,), {}, run_id="timeout")
    info = await settle(backend, "timeout")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for == "never"
    assert info.wake_at is not None and info.wake_at >= started + WAIT
    assert await handle.result() == {"timed_out": "never"}
    assert time.time() >= info.wake_at
    history = await handle.history()
    assert [ev.kind for ev in history if ev.step_key == "1:signal:never"] == [
        EventKind.SUSPENDED,
        EventKind.SIGNAL_RECEIVED,
    ]


async def test_a_wait_begun_as_the_start_drive_suspends_lets_the_process_signal(
    backend: Backend,
) -> None:
    """``wait`` used to find the start's drive, finished but not yet cleaned up, still
    listed, and loop on it without ever yielding: nothing else in the process (here the
    signal it waits for) ran again."""
    handle = await backend.start(ew.go_flow, (), {}, run_id="wait-beside")
    waited = asyncio.ensure_future(backend.wait("wait-beside", timeout=120))
    await asyncio.sleep(0)  # one turn of the loop: the wait is under way
    await handle.signal("go", "yes")
    info = await waited
    assert info.status is RunStatus.SUCCEEDED and info.result == "yes"


async def test_signalling_an_unknown_or_finished_run_is_a_typed_error(
    backend: Backend,
) -> None:
    with pytest.raises(RunNotFoundError):
        await backend.signal("nobody", "approval", by="ops")
    await (await backend.start(ew.arithmetic, (1, 2), {}, run_id="done")).result()
    with pytest.raises(InvalidRunStateError):
        await backend.signal("done", "approval", by="ops")


# -- durable sleep -----------------------------------------------------------------------


async def test_durable_sleep_suspends_until_wake_at_then_finishes(
    backend: Backend,
) -> None:
    started = time.time()
    handle = await backend.start(ew.nap_flow, (WAIT,), {}, run_id="nap")
    info = await settle(backend, "nap")
    assert info.status is RunStatus.SUSPENDED
    assert info.waiting_for is None
    assert info.wake_at is not None and info.wake_at >= started + WAIT
    assert CALLS["finish"] == 0
    assert await handle.result() == "finished:nap"
    assert time.time() >= info.wake_at
    (timer,) = of_kind(await handle.history(), EventKind.TIMER_STARTED)
    assert timer.step_key == "1:sleep"
    assert timer.data["seconds"] == WAIT and timer.data["wake_at"] == info.wake_at


async def test_sleep_of_zero_seconds_records_a_timer_without_suspending(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.nap_flow, (0,), {}, run_id="nap0")
    assert await handle.result() == "finished:nap"
    history = await handle.history()
    assert keys(history, EventKind.TIMER_STARTED) == ["1:sleep"]
    assert of_kind(history, EventKind.SUSPENDED) == []


# -- determinism -------------------------------------------------------------------------


async def _suspend_changing_v1(make_backend: MakeBackend, run_id: str) -> None:
    register_workflow(ew.changing_v1)
    first = make_backend()
    await first.start(ew.changing_v1, (), {}, run_id=run_id)
    assert (await settle(first, run_id)).status is RunStatus.SUSPENDED


async def test_a_renamed_step_under_an_in_flight_run_parks_it_with_determinism_error(
    make_backend: MakeBackend,
) -> None:
    await _suspend_changing_v1(make_backend, "renamed")
    register_workflow(ew.changing_v2)  # deploy: step 1 is now beta
    second = make_backend()
    await second.signal("renamed", "go", "ok")
    with pytest.raises(DeterminismError) as caught:
        await RunHandle(second, "renamed").result()
    assert caught.value.step_key == "1:beta"
    assert "1:alpha" in str(caught.value)
    info = await second.get_run("renamed")
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None and info.attention["reason"] == "determinism"
    assert CALLS["beta"] == 0


async def test_code_finishing_before_recorded_steps_is_a_determinism_error(
    make_backend: MakeBackend,
) -> None:
    await _suspend_changing_v1(make_backend, "shorter")
    register_workflow(ew.changing_v3)
    second = make_backend()
    await second.signal("shorter", "go", "ok")
    with pytest.raises(DeterminismError) as caught:
        await RunHandle(second, "shorter").result()
    assert caught.value.step_key == "1:alpha"
    assert (await second.get_run("shorter")).status is RunStatus.NEEDS_ATTENTION


async def test_resume_with_compatible_code_after_a_determinism_park_finishes(
    make_backend: MakeBackend,
) -> None:
    await _suspend_changing_v1(make_backend, "rollback")
    register_workflow(ew.changing_v2)
    second = make_backend()
    await second.signal("rollback", "go", "ok")
    with pytest.raises(DeterminismError):
        await RunHandle(second, "rollback").result()
    register_workflow(ew.changing_v1)  # roll the deploy back
    await second.resume("rollback")
    assert await RunHandle(second, "rollback").result() == ["v1", "a", "ok"]
    assert CALLS["alpha"] == 1


async def test_determinism_error_is_not_swallowed_by_except_exception_in_the_workflow(
    make_backend: MakeBackend,
) -> None:
    await _suspend_changing_v1(make_backend, "swallowed")
    register_workflow(ew.changing_v4)  # step 1 renamed, and guarded by `except Exception`
    second = make_backend()
    await second.signal("swallowed", "go", "ok")
    with pytest.raises(DeterminismError) as caught:
        await RunHandle(second, "swallowed").result()
    assert caught.value.step_key == "1:beta"


# -- patch markers -----------------------------------------------------------------------


async def test_a_run_recorded_before_the_patch_replays_the_old_path(
    make_backend: MakeBackend,
) -> None:
    register_workflow(ew.patchy_old)
    first = make_backend()
    await first.start(ew.patchy_old, (), {}, run_id="pre-patch")
    assert (await settle(first, "pre-patch")).status is RunStatus.SUSPENDED
    register_workflow(ew.patchy_new)
    second = make_backend()
    await second.signal("pre-patch", "go", "ok")
    assert await RunHandle(second, "pre-patch").result() == ["a", "old", "ok"]
    assert CALLS["old_mid"] == 1 and CALLS["new_mid"] == 0
    assert of_kind(await second.history("pre-patch"), EventKind.MARKER) == []


async def test_a_new_run_takes_the_patched_path_and_keeps_it_on_replay(
    make_backend: MakeBackend,
) -> None:
    register_workflow(ew.patchy_new)
    first = make_backend()
    await first.start(ew.patchy_new, (), {}, run_id="post-patch")
    assert (await settle(first, "post-patch")).status is RunStatus.SUSPENDED
    second = make_backend()
    await second.signal("post-patch", "go", "ok")
    assert await RunHandle(second, "post-patch").result() == ["a", "new", "ok"]
    assert CALLS["new_mid"] == 1 and CALLS["old_mid"] == 0
    (marker,) = of_kind(await second.history("post-patch"), EventKind.MARKER)
    assert marker.step_key == "2:patch:fix"


# -- parallel steps ----------------------------------------------------------------------


EXPECTED_FANOUT = [[10, 100], [20, 200], [30, 300]]


async def test_parallel_steps_keep_their_positions_across_replay(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    await first.start(ew.fanout_flow, (), {}, run_id="fanout")
    assert (await settle(first, "fanout")).status is RunStatus.SUSPENDED
    recorded = keys(await first.history("fanout"), EventKind.STEP_COMPLETED)
    assert sorted(recorded) == [
        "1:alpha",
        "2.1:scaled",
        "2.2:scaled",
        "3.1:scaled",
        "3.2:scaled",
        "4.1:scaled",
        "4.2:scaled",
    ]
    second = make_backend()
    await second.signal("fanout", "go", "ok")
    result = await RunHandle(second, "fanout").result()
    assert result == {"head": "a", "results": EXPECTED_FANOUT, "signal": "ok"}
    assert all(count == 1 for count in CALLS.values()) and len(CALLS) == 7


async def test_parallel_steps_started_before_any_other_step_keep_positions_across_replay(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    await first.start(ew.fanout_first_flow, (), {}, run_id="fanout-first")
    assert (await settle(first, "fanout-first")).status is RunStatus.SUSPENDED
    second = make_backend()
    await second.signal("fanout-first", "go", "ok")
    result = await RunHandle(second, "fanout-first").result()
    assert result == {"results": EXPECTED_FANOUT, "signal": "ok"}
    assert all(count == 1 for count in CALLS.values()) and len(CALLS) == 6


# -- cancellation and compensation -------------------------------------------------------


async def test_cancel_runs_compensations_newest_first_exactly_once(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    handle = await first.start(ew.booking_flow, (), {}, run_id="booking")
    assert (await settle(first, "booking")).status is RunStatus.SUSPENDED
    second = make_backend()
    info = await second.cancel("booking")
    assert info.cancel_requested
    with pytest.raises(RunCancelledError):
        await RunHandle(second, "booking").result()
    assert SEEN["compensations"] == [
        ("release", {"reserved": "seat 4A"}),
        ("refund", {"debited": 10}),
    ]
    assert CALLS["debit"] == 1 and CALLS["reserve"] == 1
    # Asking again changes nothing: the compensations ran exactly once.
    with pytest.raises(RunCancelledError):
        await handle.result()
    with pytest.raises(InvalidRunStateError):
        await second.cancel("booking")
    assert CALLS["release"] == 1 and CALLS["refund"] == 1
    history = await second.history("booking")
    compensations = [
        ev
        for ev in of_kind(history, EventKind.STEP_COMPLETED)
        if (ev.name or "").startswith("compensate:")
    ]
    assert [ev.name for ev in compensations] == ["compensate:reserve", "compensate:debit"]
    assert history[-1].kind is EventKind.RUN_CANCELLED
    assert history[-1].data["compensated"] == ["2:reserve", "1:debit"]
    assert (await second.get_run("booking")).status is RunStatus.CANCELLED


async def test_cancel_while_an_effect_runs_compensates_that_effect_too(
    backend: Backend,
) -> None:
    handle = await backend.start(ew.cancel_midway_flow, (), {}, run_id="midway")
    await ew.gate("slow_debit:started").wait()
    await backend.cancel("midway")
    ew.gate("slow_debit").set()  # the debit completes after the cancel request
    with pytest.raises(RunCancelledError):
        await handle.result()
    assert CALLS["slow_debit"] == 1
    assert SEEN["compensations"] == [("refund", {"debited": 5})]


# -- idempotent start --------------------------------------------------------------------


async def test_starting_an_existing_run_id_returns_it_without_a_second_drive(
    make_backend: MakeBackend,
) -> None:
    first = make_backend()
    handle = await first.start(ew.gated_flow, ("first",), {}, run_id="once")
    await ew.gate("gated:started").wait()  # the first drive is in flight
    again = await first.start(ew.gated_flow, ("second",), {}, run_id="once")
    elsewhere = await make_backend().start(ew.gated_flow, ("third",), {}, run_id="once")
    assert again.run_id == elsewhere.run_id == "once"
    ew.gate("gated").set()
    assert await handle.result() == "first"
    assert await again.result() == "first"
    assert await elsewhere.result() == "first"
    assert CALLS["hold:gated"] == 1
    history = await first.history("once")
    assert len(of_kind(history, EventKind.RUN_STARTED)) == 1
    assert (await first.get_run("once")).input == {"args": ["first"], "kwargs": {}}


# -- fencing -----------------------------------------------------------------------------


async def _fence_out(
    store: Store,
    make_backend: MakeBackend,
    monkeypatch: pytest.MonkeyPatch,
    workflow: Workflow[..., Any],
    run_id: str,
) -> tuple[Backend, Backend, list[str], int]:
    """Start ``run_id`` on one backend, and while its first step runs let a second take
    the run over. Returns both backends, the owners whose appends were rejected, and the
    history length at the takeover. The first backend's appends are watched."""
    rejected: list[str] = []
    first, second = make_backend(), make_backend()
    assert isinstance(first, EmbeddedBackend) and isinstance(second, EmbeddedBackend)
    watched = first.store
    real_append = watched.append

    async def spy(lease: Any, events: Any, **kw: Any) -> None:
        try:
            await real_append(lease, events, **kw)
        except LeaseLostError:
            rejected.append(lease.owner)
            raise

    monkeypatch.setattr(watched, "append", spy)
    await first.start(workflow, (), {}, run_id=run_id)
    await ew.gate("fenced:started").wait()
    taken = len(await store.load_history(run_id))
    lease = await store.acquire(
        run_id, second.owner, 30.0, now=time.time(), break_owner=first.owner
    )
    assert lease is not None and lease.fence == 2
    ew.gate("fenced").set()
    assert await first.idle() is None  # the stale drive stopped
    await store.release(lease)
    return first, second, rejected, taken


@needs_store
async def test_a_fenced_out_drive_stops_without_writing(
    store: Store, make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, rejected, taken = await _fence_out(
        store, make_backend, monkeypatch, ew.fenced_flow, "fenced"
    )
    assert rejected and set(rejected) == {first.owner}
    assert len(await store.load_history("fenced")) == taken
    assert CALLS["after_fence"] == 0
    # The new owner drives the run from the history the stale one could not touch.
    assert await RunHandle(second, "fenced").result() == ["fenced", "after"]
    history = await store.load_history("fenced")
    assert keys(history, EventKind.STEP_COMPLETED) == ["1:hold", "2:after_fence"]


@needs_store
async def test_a_fenced_out_workflow_that_catches_exception_executes_no_further_step(
    store: Store, make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _second, rejected, taken = await _fence_out(
        store, make_backend, monkeypatch, ew.fenced_swallow_flow, "fenced-swallow"
    )
    assert set(rejected) == {first.owner}
    assert len(await store.load_history("fenced-swallow")) == taken
    assert CALLS["after_fence"] == 0  # a stale worker must not go on calling steps
