"""Bad input gets a typed error that says what and where, and loses nothing."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

import perdure
from perdure import EventKind, RunStatus
from perdure.registry import open_backend
from perdure.testing import Processes, Receiver


@pytest.fixture
def scenarios(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import scenarios

    return scenarios


def corrupt_event(url: str, run_id: str, seq: int) -> None:
    """Overwrite one history row with bytes that are not JSON, behind the store's back."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                "UPDATE events SET data = ? WHERE run_id = ? AND seq = ?",
                ("{not json", run_id, seq),
            )
        return
    parts = urlsplit(url)
    schema = parse_qs(parts.query)["schema"][0]
    with psycopg.connect(parts._replace(query="").geturl(), autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{schema}".events SET data = %s WHERE run_id = %s AND seq = %s',
            ("{not json", run_id, seq),
        )


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
    perdure_backend: Any, perdure_url: str, scenarios: Any
) -> None:
    handle = await perdure_backend.start(scenarios.approval, ("1",), {}, run_id="r-corrupt")
    await perdure_backend.idle()
    assert (await handle.status()) is RunStatus.SUSPENDED
    corrupt_event(perdure_url, "r-corrupt", 1)

    with pytest.raises(perdure.CorruptHistoryError, match=r"r-corrupt.*#1"):
        await perdure_backend.history("r-corrupt")

    await perdure_backend.signal("r-corrupt", perdure.APPROVAL, {"approved": True}, by="x")
    info = await perdure_backend.wait("r-corrupt")
    assert info.status is RunStatus.NEEDS_ATTENTION  # parked, never continued wrongly
    assert info.attention is not None
    assert info.attention["reason"] == "CorruptHistoryError"
    corrupt_event(perdure_url, "r-corrupt", 1)  # the row is still there to repair


async def test_an_undecodable_signal_payload_is_refused_and_nothing_is_written(
    perdure_backend: Any, scenarios: Any
) -> None:
    await perdure_backend.start(scenarios.approval, ("2",), {}, run_id="r-payload")
    await perdure_backend.idle()
    before = await perdure_backend.history("r-payload")
    with pytest.raises(perdure.SerializationError, match="payload of signal"):
        await perdure_backend.signal("r-payload", perdure.APPROVAL, {"when": object()})
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
