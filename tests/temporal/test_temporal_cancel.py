"""A cancel on Temporal is Temporal cancellation of the drive activity in flight: its
heartbeat brings it, the step in flight is cancelled, compensations run and the run
ends cancelled; an effect whose outcome nobody knows parks it. Side effects are
counted by a receiver outside the worker."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from perdure import RunStatus
from perdure.testing.receivers import Receiver
from perdure_temporal import TemporalBackend, TemporalUrl
from perdure_temporal.devserver import temporal_binary
from perdure_temporal.testing import session_target


async def _cancel_with_temporal_cli(url: str, run_id: str) -> None:
    config = TemporalUrl.parse(url)
    done = await asyncio.to_thread(
        subprocess.run,
        [
            str(temporal_binary()),
            "workflow",
            "cancel",
            "--address",
            session_target(),
            "--namespace",
            config.namespace,
            "--workflow-id",
            f"{config.id_prefix}{run_id}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("how", ["perdure", "temporal-cli"])
async def test_a_cancel_interrupts_the_step_in_flight_and_compensates_once(
    backend: TemporalBackend, url: str, flows: Any, receiver: Receiver, how: str
) -> None:
    await backend.start(flows.reserve_then_look_up, (receiver.url,), {}, run_id="looking")
    await asyncio.to_thread(receiver.wait_requests, "lookup-began", 1)

    if how == "perdure":
        await backend.cancel("looking")
    else:
        await _cancel_with_temporal_cli(url, "looking")
    info = await backend.wait("looking", timeout=120)

    assert info.status is RunStatus.CANCELLED
    # The step's body saw the cancellation: it did not run to its end.
    assert receiver.requests["lookup-cancelled"] == 1
    assert receiver.applied["release"] == 1  # the completed step's compensation, once
    history = await backend.history("looking")
    assert not [e for e in history if e.step_key and e.step_key.endswith("long_lookup")]


async def test_a_cancel_during_a_non_idempotent_effect_parks_the_run(
    backend: TemporalBackend, flows: Any, receiver: Receiver
) -> None:
    held = receiver.hold("mail", "before")
    try:
        await backend.start(flows.reserve_then_mail, (receiver.url,), {}, run_id="mailing")
        await asyncio.to_thread(receiver.wait_held, held)

        await backend.cancel("mailing")
        info = await backend.wait("mailing", timeout=120)
    finally:
        held.drop()

    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "unknown-outcome"
    assert info.attention["step_key"].endswith(":mail")
    assert info.cancel_requested
    assert receiver.applied["release"] == 0  # nothing guessed: the operator decides
