"""Bad input gets a typed error that says what and where, and loses nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure._registry import open_backend
from perdure.testing import Processes, Receiver


@pytest.fixture
def scenarios(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import scenarios

    return scenarios


async def test_an_unknown_run_id_is_a_typed_error_and_cli_exit_3(
    perdure_backend: Any, processes: Processes
) -> None:
    with pytest.raises(perdure.RunNotFoundError, match="no-such-run"):
        await perdure_backend.get_run("no-such-run")
    shown = processes.cli("runs", "show", "no-such-run")
    assert shown.returncode == 3
    assert "no-such-run" in shown.stderr


@pytest.mark.parametrize("url", ["nonsense", "mysql://x@localhost/db", "sqlite:///:memory:"])
def test_a_malformed_or_unknown_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(perdure.ConfigurationError):
        open_backend(url)


async def test_unreachable_postgresql_is_a_backend_unavailable_error() -> None:
    backend = open_backend("postgresql://postgres@127.0.0.1:1/test")
    with pytest.raises(perdure.BackendUnavailableError, match=r"127\.0\.0\.1"):
        await backend.open()


async def test_a_corrupt_history_row_is_named_and_left_intact(
    perdure_backend: Any, perdure_corrupt: Callable[[str, int], None], scenarios: Any
) -> None:
    handle = await perdure_backend.start(scenarios.approval, ("1",), {}, run_id="r-corrupt")
    await perdure_backend.idle()
    assert (await handle.status()) is RunStatus.SUSPENDED
    perdure_corrupt("r-corrupt", 1)

    with pytest.raises(perdure.CorruptHistoryError, match=r"r-corrupt.*#1"):
        await perdure_backend.history("r-corrupt")

    await perdure_backend.signal("r-corrupt", perdure.APPROVAL, {"approved": True}, by="x")
    info = await perdure_backend.wait("r-corrupt")
    assert info.status is RunStatus.NEEDS_ATTENTION  # parked, never continued wrongly
    assert info.attention is not None
    assert info.attention["reason"] == "CorruptHistoryError"
    perdure_corrupt("r-corrupt", 1)  # the row is still there to repair


async def test_an_undecodable_signal_payload_is_refused_and_nothing_is_written(
    perdure_backend: Any, scenarios: Any
) -> None:
    await perdure_backend.start(scenarios.approval, ("2",), {}, run_id="r-payload")
    await perdure_backend.idle()
    before = await perdure_backend.history("r-payload")
    with pytest.raises(perdure.SerializationError, match="payload of signal"):
        await perdure_backend.signal("r-payload", perdure.APPROVAL, {"when": object()}, by="ops")
    assert await perdure_backend.history("r-payload") == before
    assert (await perdure_backend.get_run("r-payload")).status is RunStatus.SUSPENDED


async def test_a_non_serializable_result_fails_at_the_step_that_produced_it(
    perdure_backend: Any, scenarios: Any
) -> None:
    handle = await perdure_backend.start(scenarios.bad_result, (), {}, run_id="r-bad")
    with pytest.raises(perdure.RunFailedError) as failure:
        await handle.result()
    assert failure.value.error["step"] == "2:not_storable"
    assert "SerializationError" in failure.value.error["cause"]["type"]
    history = await perdure_backend.history("r-bad")
    assert [e.step_key for e in history if e.kind is EventKind.STEP_COMPLETED] == ["1:lookup"]
