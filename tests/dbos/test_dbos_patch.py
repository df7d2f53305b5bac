"""``perdure.patched`` across a deploy on DBOS: a run recorded by the old code, recovered
by a worker of the new code (the same application version: the patch is what keeps old
runs replayable), keeps the old path; a run the new code starts takes the new one.

The marker is perdure's (an event in the run's next DBOS step), not ``DBOS.patch``: DBOS
never replays a perdure step, perdure's replay does, so it is perdure's history that must
say which path a run took.
"""

from __future__ import annotations

from typing import Any

from dbos_spawn import drive

from perdure import EventKind, RunStatus
from perdure.testing import Processes, Receiver, wait_for_status

SAME = {"PERDURE_CODE_VERSION": "v1"}
MARKER = EventKind.MARKER


async def test_an_old_run_keeps_its_path_and_a_new_run_takes_the_patch_across_a_deploy(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    old = drive(processes, "dbos_patchy", run_id="r-old", module="dbos_patch_old", **SAME)
    assert old.wait() == 0, old.output()
    # The deploy: only the new code runs from here on.
    processes.worker("dbos_patch_new", env={**SAME, "DBOS__VMID": "new-code"})
    new = drive(processes, "dbos_patchy", run_id="r-new", module="dbos_patch_new", **SAME)
    assert new.wait() == 0, new.output()
    for run_id in ("r-old", "r-new"):
        await wait_for_status(perdure_backend, run_id, (RunStatus.SUSPENDED,))
        await perdure_backend.signal(run_id, "go", "ok")
    for run_id in ("r-old", "r-new"):
        info = await wait_for_status(perdure_backend, run_id, (RunStatus.SUCCEEDED,))
        assert info.owner == "new-code"  # the new code's worker finished both
    assert (receiver.requests["old_mid"], receiver.requests["new_mid"]) == (1, 1)
    markers = {
        run_id: [
            e.step_key for e in await perdure_backend.history(run_id) if e.kind is EventKind.MARKER
        ]
        for run_id in ("r-old", "r-new")
    }
    assert markers == {"r-old": [], "r-new": ["1:patch:new-mid"]}, markers
