"""``perdure temporal setup`` prepares a namespace once: it creates perdure's search
attributes, which workers never create at run time; runs start there afterwards."""

from __future__ import annotations

import uuid
from pathlib import Path

from google.protobuf.duration_pb2 import Duration
from temporal_cli_support import perdure_cli
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from perdure import RunStatus
from perdure._registry import open_backend
from perdure_temporal.testing import fresh_url, session_target


async def test_setup_creates_the_search_attributes_of_a_new_namespace_once(
    tmp_path: Path,
) -> None:
    import temporal_flows

    namespace = f"setup-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(session_target())
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    url = fresh_url(tmp_path).replace("/default?", f"/{namespace}?")

    first = perdure_cli("temporal", "setup", "--url", url)
    assert first.returncode == 0, first.stderr
    assert "added: PerdureStatus, PerdureWorkflow" in first.stdout
    again = perdure_cli("temporal", "setup", "--url", url)
    assert again.returncode == 0, again.stderr
    assert "present" in again.stdout

    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(temporal_flows.waits, (), {}, run_id="after-setup")
        await backend.idle()
        [listed] = await backend.list_runs(statuses=[RunStatus.SUSPENDED])
        assert listed.run_id == "after-setup"
    finally:
        await backend.close()


def test_setup_of_an_unreachable_server_says_so_with_exit_code_4() -> None:
    shown = perdure_cli("temporal", "setup", "--url", "temporal://127.0.0.1:1/default")
    assert shown.returncode == 4, shown.stderr
    assert "127.0.0.1:1" in shown.stderr and "unavailable" in shown.stderr
