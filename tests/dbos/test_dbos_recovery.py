"""DBOS's own recovery: across hosts, with waiting runs holding no slot, by version.

A dead executor's runs are handed to DBOS's recovery (re-enqueued, one live executor of
the run's application version dequeues each). An executor is dead when its heartbeat in
perdure's table is older than ``PERDURE_DBOS_EXECUTOR_TIMEOUT`` (another host), when it
shut down, or when its process is gone from this host.
"""

from __future__ import annotations

from typing import Any

from dbos_spawn import drive, until, worker_up

import perdure
from perdure import RunStatus
from perdure._cli.render import run_summary
from perdure.testing import Processes, Receiver, wait_for_status

ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)
#: A short executor timeout, so a dead host's runs are taken over soon.
FAST = {"PERDURE_DBOS_EXECUTOR_TIMEOUT": "4"}


async def test_a_dead_executor_of_another_host_is_recovered_by_a_live_worker(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    hold = receiver.hold("charge", "after")
    # Host B's deployment slot: a stable executor id, no process a worker here can see.
    host_b = drive(processes, "dbos_approval", "8", run_id="r-host", DBOS__VMID="host-b/1", **FAST)
    receiver.wait_held(hold)
    host_b.kill()
    hold.release.set()
    info = await perdure_backend.get_run("r-host")
    assert info.status is RunStatus.RUNNING
    assert info.owner == "host-b/1"

    processes.worker("dbos_flows", env={"DBOS__VMID": "host-a/1", **FAST})
    info = await wait_for_status(perdure_backend, "r-host", (RunStatus.SUSPENDED, *ENDED))
    assert info.status is RunStatus.SUSPENDED, info
    assert info.owner == "host-a/1"
    assert receiver.applied["lookup"] == 1
    assert receiver.requests["charge"] == 2  # re-sent with its key after the kill ...
    assert receiver.applied["charge"] == 1  # ... so applied once
    await perdure_backend.signal("r-host", perdure.APPROVAL, {"approved": True}, by="ann")
    info = await wait_for_status(perdure_backend, "r-host", ENDED)
    assert info.status is RunStatus.SUCCEEDED, info
    assert receiver.applied["email"] == 1


async def test_a_worker_with_four_slots_holding_ten_waiting_runs_finishes_twenty_more(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    first = drive(processes, "dbos_approval", "w", run_id="wait", count=10)
    assert first.wait() == 0, first.output()
    waiting = [f"wait-{i}" for i in range(10)]
    processes.spawn(
        "-m", "perdure", "worker", "dbos_flows", "--url", processes.url, "--concurrency", "4",
        env={"DBOS__VMID": "slots-4"},
    )  # fmt: skip
    await worker_up("slots-4")

    async def suspended_by_worker(run_ids: list[str]) -> Any:
        infos = [await perdure_backend.get_run(r) for r in run_ids]
        states = [(i.owner, i.status, i.details["dbos"]["status"]) for i in infos]
        return True if set(states) == {("slots-4", RunStatus.SUSPENDED, "DELAYED")} else states

    # A delivery that is not the awaited answer: the worker drives each run again, to
    # the same wait, and it suspends there again, holding nothing.
    for run_id in waiting:
        await perdure_backend.signal(run_id, "poke", None)
    await until(lambda: suspended_by_worker(waiting), "the worker drives the ten to their wait")
    second = drive(processes, "dbos_gated", "g", run_id="more", count=20)
    assert second.wait() == 0, second.output()
    more = [f"more-{i}" for i in range(20)]
    for run_id in more:
        await perdure_backend.signal(run_id, "go", None)
    for run_id in more:
        info = await wait_for_status(perdure_backend, run_id, ENDED)
        assert info.status is RunStatus.SUCCEEDED, info
        assert info.owner == "slots-4"
    assert await suspended_by_worker(waiting) is True  # still waiting all along
    for run_id in waiting:
        await perdure_backend.signal(run_id, perdure.APPROVAL, {"approved": False}, by="ann")
    for run_id in waiting:
        info = await wait_for_status(perdure_backend, run_id, ENDED)
        assert info.status is RunStatus.SUCCEEDED, info
    assert receiver.applied["lookup"] == 30


async def test_a_run_is_recovered_only_by_a_worker_of_its_version(
    perdure_backend: Any, receiver: Receiver, processes: Processes
) -> None:
    hold = receiver.hold("charge", "after")
    v1 = drive(processes, "dbos_approval", "8", run_id="r-v1", PERDURE_CODE_VERSION="v1")
    receiver.wait_held(hold)
    v1.kill()
    hold.release.set()
    v2 = drive(processes, "dbos_approval", "9", run_id="r-v2", PERDURE_CODE_VERSION="v2")
    assert v2.wait() == 0, v2.output()
    before = await perdure_backend.get_run("r-v1")
    assert before.status is RunStatus.RUNNING
    assert before.details["dbos"]["application_version"] == "v1"
    # `perdure runs list` says why nobody drives it: no live worker runs its version.
    assert "died; no live worker of application version v1" in run_summary(before)

    # A v2 worker takes the v2 run and, in the same recovery passes, leaves the v1 run.
    processes.worker("dbos_flows", env={"PERDURE_CODE_VERSION": "v2", "DBOS__VMID": "w-v2"})
    await perdure_backend.signal("r-v2", perdure.APPROVAL, {"approved": True}, by="ann")
    info = await wait_for_status(perdure_backend, "r-v2", ENDED)
    assert info.status is RunStatus.SUCCEEDED, info
    assert info.owner == "w-v2"
    assert info.details["dbos"]["application_version"] == "v2"
    after = await perdure_backend.get_run("r-v1")
    assert (after.status, after.owner) == (RunStatus.RUNNING, before.owner)
    assert "(live workers' versions: v2)" in run_summary(after)
    assert "PERDURE_CODE_VERSION=v1" in run_summary(after)
    assert receiver.requests["charge"] == 2  # one per run: nobody re-drove r-v1

    processes.worker("dbos_flows", env={"PERDURE_CODE_VERSION": "v1", "DBOS__VMID": "w-v1"})
    info = await wait_for_status(perdure_backend, "r-v1", (RunStatus.SUSPENDED, *ENDED))
    assert info.status is RunStatus.SUSPENDED, info
    assert info.owner == "w-v1"
    assert info.details["dbos"]["application_version"] == "v1"
    assert receiver.requests["charge"] == 3  # r-v1's charge re-sent with its key ...
    assert receiver.applied["charge"] == 2  # ... and applied once
    await perdure_backend.signal("r-v1", perdure.APPROVAL, {"approved": False}, by="bob")
    info = await wait_for_status(perdure_backend, "r-v1", ENDED)
    assert info.status is RunStatus.SUCCEEDED, info
