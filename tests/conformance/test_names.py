"""Finding 8: run ids and signal names are checked once, identically on every backend.

Empty, over-long, NUL-holding and lone-surrogate names get ``InvalidInputError`` naming
the field before any substrate sees them; nothing is written. Names at the edges of what
is allowed (longest, non-ASCII, SQL-looking) round-trip.
"""

from __future__ import annotations

from typing import Any

import pytest

import perdure
from perdure import RunStatus
from perdure._validation import MAX_NAME_LENGTH
from perdure.testing import Processes, Receiver

BAD = {
    "empty": "",
    "too long": "x" * (MAX_NAME_LENGTH + 1),
    "NUL": "a\x00b",
    "lone surrogate": "a\ud800b",
}
GOOD = ["x" * MAX_NAME_LENGTH, "ünï-cødé ✓ 注文", "x'; DROP TABLE runs;--"]


@pytest.fixture
def scenarios(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import scenarios

    return scenarios


@perdure.workflow(name="names.wait")
async def wait_once() -> Any:
    return await perdure.wait_for_signal(perdure.APPROVAL)


async def test_a_bad_run_id_is_refused_by_every_entry_point(
    perdure_backend: Any, scenarios: Any
) -> None:
    for bad in BAD.values():
        await _refused_everywhere(perdure_backend, scenarios, bad)
    assert await perdure_backend.list_runs() == []  # nothing was written


async def _refused_everywhere(perdure_backend: Any, scenarios: Any, bad: str) -> None:
    calls = [
        perdure_backend.start(scenarios.approval, ("1",), {}, run_id=bad),
        perdure_backend.get_run(bad),
        perdure_backend.history(bad),
        perdure_backend.signal(bad, perdure.APPROVAL, {"approved": True}, by="ops"),
        perdure_backend.cancel(bad),
        perdure_backend.resume(bad),
        perdure_backend.reconcile(bad, "1:charge", "retry", by="ops"),
    ]
    for call in calls:
        with pytest.raises(perdure.InvalidInputError, match="invalid run id") as info:
            await call
        assert info.value.field == "run id"


async def test_a_bad_signal_name_is_refused_and_the_run_keeps_waiting(
    perdure_backend: Any,
) -> None:
    await perdure_backend.start(wait_once, (), {}, run_id="names-signal")
    await perdure_backend.idle()
    for bad in BAD.values():
        with pytest.raises(perdure.InvalidInputError, match="invalid signal name"):
            await perdure_backend.signal("names-signal", bad, {"approved": True}, by="ops")
    assert (await perdure_backend.get_run("names-signal")).status is RunStatus.SUSPENDED


async def test_names_at_the_edges_of_what_is_allowed_round_trip(perdure_backend: Any) -> None:
    for run_id in GOOD:
        await perdure_backend.start(wait_once, (), {}, run_id=run_id)
    await perdure_backend.idle()
    for run_id in GOOD:
        info = await perdure_backend.get_run(run_id)
        assert info.run_id == run_id and info.status is RunStatus.SUSPENDED
    assert sorted(r.run_id for r in await perdure_backend.list_runs()) == sorted(GOOD)
    await perdure_backend.signal(GOOD[1], perdure.APPROVAL, "yes", by="ops")
    assert (await perdure_backend.wait(GOOD[1], timeout=60)).result == "yes"


def test_the_cli_refuses_a_bad_run_id_with_a_usage_error(processes: Processes) -> None:
    shown = processes.cli("runs", "show", "")
    assert shown.returncode == 2, shown.stderr
    assert "invalid run id" in shown.stderr


def test_step_and_signal_names_in_code_are_checked_where_they_are_declared() -> None:
    with pytest.raises(perdure.InvalidInputError, match="step name"):
        perdure.step(name="a\x00b")(lambda: None)
    with pytest.raises(perdure.InvalidInputError, match="signal name"):
        perdure.wait_for_signal("").send(None)
