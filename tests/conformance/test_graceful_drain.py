"""A rolling deploy: SIGTERM a worker in the middle of a non-idempotent effect while its
replacement starts. The old worker lets the effect finish and records it, releases the
run and exits 0; the new one takes the run over at once (well inside the 30 s lease) and
finishes it. No run needs attention, no effect runs twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

from perdure import EventKind, RunStatus
from perdure._registry import open_backend
from perdure.testing import Processes, Receiver, wait_for_status

STOPPED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION)
#: Shorter than the 30 s lease: the run is released, not left to expire.
TAKEN_OVER_WITHIN = 25.0


async def test_sigterm_mid_effect_during_a_rolling_deploy_parks_nothing(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    # Leave the run to the workers: its starter dies before the first step applies.
    first = receiver.hold("lookup", "before")
    starter = processes.drive("scenarios", "refund", "7", run_id="r-deploy")
    receiver.wait_held(first)
    starter.kill()
    first.drop()

    email = receiver.hold("email", "after")  # the old worker is mid-effect here
    old = processes.worker("scenarios")
    receiver.wait_held(email)
    new = processes.worker("scenarios")  # the replacement starts ...
    old.terminate()  # ... and the old one gets SIGTERM, as in a rolling deploy
    # The effect answers only once the old worker drains: it is cut mid-effect for sure.
    await asyncio.to_thread(old.wait_output, "in-flight steps finish and record")
    email.release.set()
    assert old.wait(60) == 0, old.output()

    info = await wait_for_status(perdure_backend, "r-deploy", STOPPED, timeout=TAKEN_OVER_WITHIN)
    assert info.status is RunStatus.SUCCEEDED, (info.attention, old.output())
    history = await perdure_backend.history("r-deploy")
    assert EventKind.NEEDS_ATTENTION not in [e.kind for e in history]
    assert receiver.requests["email"] == 1
    assert receiver.applied["charge"] == 1
    assert receiver.applied["done"] == 1
    assert new.popen.poll() is None  # the replacement is still serving


async def test_every_backend_signals_its_drain(perdure_url: str) -> None:
    """``Backend.draining`` is set once a backend begins to shut down (what a deploy
    script or a test waits on) and stays set after, so a late waiter returns at once."""
    backend = open_backend(perdure_url)
    await backend.open()
    assert not backend.draining.is_set()
    began = asyncio.ensure_future(backend.draining.wait())
    await backend.shutdown(grace=0)
    assert backend.draining.is_set()
    await began
