"""Temporal recovers a run itself: a drive whose process was SIGKILLed is a heartbeat
timeout, and Temporal retries it on another worker of the task queue."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NamedTuple

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import TimeoutType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client

from perdure import RunStatus
from perdure._backend import Backend
from perdure._registry import open_backend
from perdure.testing import Patience, Process, Processes, Receiver, wait_for_status
from perdure_temporal import TemporalUrl
from perdure_temporal.devserver import DevServer, free_port
from perdure_temporal.testing import fresh_url

CONFORMANCE = Path(__file__).parent.parent / "conformance"


class Refunds(NamedTuple):
    """A URL whose drives time out 3 s after their last heartbeat, its backend, the
    receiver the effects reach and the processes that drive the conformance scenarios."""

    url: str
    backend: Backend
    receiver: Receiver
    procs: Processes


@contextlib.asynccontextmanager
async def refunds(tmp_path: Path) -> AsyncIterator[Refunds]:
    url = fresh_url(tmp_path, heartbeat_timeout=3)
    backend = open_backend(url)
    await backend.open()
    try:
        with Receiver() as receiver:
            env = {"PERDURE_TEST_RECEIVER": receiver.url}
            procs = Processes(url, env=env, pythonpath=[CONFORMANCE])
            try:
                yield Refunds(url, backend, receiver, procs)
            finally:
                procs.close()
    finally:
        await backend.close()


async def test_a_sigkilled_drive_is_finished_by_a_worker_of_another_identity(
    tmp_path: Path,
) -> None:
    async with refunds(tmp_path) as (url, backend, receiver, procs):
        hold = receiver.hold("charge", "before")
        driver = procs.drive("scenarios", "refund", "42", run_id="cross-host")
        receiver.wait_held(hold)
        driver.kill()
        hold.drop()
        worker = procs.worker("scenarios")

        info = await backend.wait("cross-host", timeout=120, drive=False)
        assert info.status is RunStatus.SUCCEEDED
        assert receiver.applied["lookup"] == 1  # recorded before the kill: replayed
        assert receiver.applied["charge"] == 1
        assert receiver.applied["email"] == 1

        config = TemporalUrl.parse(url)
        client = await Client.connect(config.target, namespace=config.namespace)
        handle = client.get_workflow_handle(f"{config.id_prefix}cross-host")
        started = [
            e.activity_task_started_event_attributes
            async for e in handle.fetch_history_events()
            if e.HasField("activity_task_started_event_attributes")
        ]
        first = started[0]  # the drive the killed process had begun
        assert first.attempt >= 2
        assert first.identity.startswith(f"{worker.pid}@")
        assert not first.identity.startswith(f"{driver.pid}@")
        assert first.last_failure.timeout_failure_info.timeout_type == (
            TimeoutType.TIMEOUT_TYPE_HEARTBEAT
        )


async def test_a_stalled_attempt_that_timed_out_hands_its_effects_outcome_to_the_run(
    tmp_path: Path,
) -> None:
    """The driving process stalls (SIGSTOP) after the mail relay sent the email but
    before the worker heard back; Temporal times the attempt out and another worker's
    attempt parks the run on the email's intent. The stalled process resumes (SIGCONT)
    with the relay's answer: its write is fenced out, and it hands the outcome over, so
    the run finishes without an operator and without sending the email again."""
    async with refunds(tmp_path) as (_, backend, receiver, procs):
        hold = receiver.hold("email", "after")
        driver = procs.drive("scenarios", "refund", "42", run_id="stalled")
        try:
            receiver.wait_held(hold)  # the relay sent it; its answer is held
            os.kill(driver.pid, signal.SIGSTOP)
            procs.worker("scenarios")
            parked = await wait_for_status(backend, "stalled", (RunStatus.NEEDS_ATTENTION,))
            assert parked.attention is not None
            assert parked.attention["step_key"] == "3:email"

            hold.release.set()  # the answer waits in the stalled process's socket
            os.kill(driver.pid, signal.SIGCONT)
            info = await wait_for_status(
                backend, "stalled", (RunStatus.SUCCEEDED, RunStatus.FAILED), timeout=120
            )
            assert info.status is RunStatus.SUCCEEDED, (info.error, info.attention)
            assert receiver.requests["email"] == 1  # never sent again
            assert receiver.applied["done"] == 1
            history = await backend.history("stalled")
            kinds = [e.kind.value for e in history if e.step_key == "3:email"]
            assert kinds == ["intent", "needs_attention", "step_completed"]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(driver.pid, signal.SIGCONT)


async def test_a_temporal_reset_past_an_intent_parks_the_run_instead_of_resending(
    tmp_path: Path,
) -> None:
    import temporal_flows

    url = fresh_url(tmp_path)
    config = TemporalUrl.parse(url)
    backend = open_backend(url)
    await backend.open()
    try:
        with Receiver() as receiver:
            await backend.start(temporal_flows.mail_then_wait, (receiver.url,), {}, run_id="reset")
            await backend.idle()
            assert (await backend.get_run("reset")).status is RunStatus.SUSPENDED
            assert receiver.requests["mail"] == 1

            # An operator resets the workflow to its first workflow task: before the
            # drive recorded the mail's intent, let alone its outcome.
            client = await Client.connect(config.target, namespace=config.namespace)
            wid = f"{config.id_prefix}reset"
            tasks = [
                e.event_id
                async for e in client.get_workflow_handle(wid).fetch_history_events()
                if e.HasField("workflow_task_completed_event_attributes")
            ]
            await client.workflow_service.reset_workflow_execution(
                ResetWorkflowExecutionRequest(
                    namespace=config.namespace,
                    workflow_execution=WorkflowExecution(workflow_id=wid),
                    reason="test: reset past an intent",
                    workflow_task_finish_event_id=tasks[0],
                    request_id=uuid.uuid4().hex,
                )
            )

            info = await backend.wait("reset", timeout=60)
            assert info.status is RunStatus.NEEDS_ATTENTION
            assert info.attention is not None
            assert info.attention["reason"] == "unknown-outcome"
            assert info.attention["step_key"] == "1:mail"
            assert receiver.requests["mail"] == 1  # never sent again blindly
    finally:
        await backend.close()


async def _unrecorded_steps(client: Client, workflow_id: str) -> list[str]:
    """The step keys the run's running drive heartbeated as not yet recorded."""
    desc = await client.get_workflow_handle(workflow_id).describe()
    keys: list[str] = []
    for pending in desc.raw_description.pending_activities:
        for payload in pending.heartbeat_details.payloads:
            details = client.data_converter.payload_converter.from_payload(payload)
            keys += [row["step_key"] for row in details.get("unrecorded") or ()]
    return keys


async def _until_unrecorded(
    client: Client, workflow_id: str, step_key: str, driver: Process, stall: float = 120.0
) -> None:
    """Poll the server until the running drive heartbeats ``step_key`` as done but not
    recorded; fail after ``stall`` seconds in which the heartbeated keys did not change
    (Patience: a drive still getting through its steps is given the time it needs)."""
    patience = Patience(stall)
    while True:
        keys = await _unrecorded_steps(client, workflow_id)
        if step_key in keys:
            return
        patience.observe(tuple(keys))
        assert not patience.expired(), (
            f"{step_key} never heartbeated as unrecorded (still {keys}, "
            f"{patience.waited():.0f}s in all)\n{driver.output()}"
        )
        await asyncio.sleep(0.1)  # paces the polls of the server's state


async def test_a_completion_whose_record_never_landed_survives_the_sigkill_of_its_worker(
    tmp_path: Path,
) -> None:
    """The drive ran a non-idempotent effect, but no workflow worker was there to take
    its record; the drive's process is SIGKILLed, and the server restarts (which drops
    the record it had not yet accepted). The next attempt, on another worker, records
    the completion from the killed attempt's last heartbeat instead of parking the run
    on an unknown outcome (or sending the email again)."""
    server = DevServer(port=free_port(), db_file=tmp_path / "temporal.db")
    await asyncio.to_thread(server.start)
    tag = uuid.uuid4().hex[:12]
    url = server.url(
        task_queue=f"t-{tag}",
        id_prefix=f"{tag}-",
        payloads=str(tmp_path / "p"),
        heartbeat_timeout=3,
    )
    wid = f"{tag}-unrecorded"
    with Receiver() as receiver:
        env = {"PERDURE_TEST_RECEIVER": receiver.url}
        everyone = Processes(url, env=env, pythonpath=[CONFORMANCE])
        workflows = Processes(f"{url}&role=workflows", env=env, pythonpath=[CONFORMANCE])
        drives = Processes(f"{url}&role=drives", env=env, pythonpath=[CONFORMANCE])
        observer = open_backend(f"{url}&role=drives")  # reads only: no workflow tasks here
        try:
            hold = receiver.hold("email", "after")
            tasks = workflows.worker("scenarios")
            driver = drives.drive("scenarios", "refund", "42", run_id="unrecorded")
            receiver.wait_held(hold)
            tasks.kill()  # the email's record will find no workflow worker
            hold.release.set()
            client = await Client.connect(server.target)
            await _until_unrecorded(client, wid, "3:email", driver)
            driver.kill()
            await asyncio.to_thread(server.stop)
            await asyncio.to_thread(server.start)
            everyone.worker("scenarios")

            await observer.open()
            info = await observer.wait("unrecorded", timeout=120, drive=False)
            assert info.status is RunStatus.SUCCEEDED, info.attention
            assert receiver.applied["email"] == 1
            history = await observer.history("unrecorded")
            emails = [e for e in history if e.step_key == "3:email"]
            assert [e.kind.value for e in emails] == ["intent", "step_completed"]
        finally:
            for procs in (everyone, workflows, drives):
                procs.close()
            await observer.close()
            await asyncio.to_thread(server.stop)
