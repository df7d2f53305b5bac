"""With perdure's encryption key configured, Temporal's own history of a run — every
payload of every event, its memo, the drives' inputs, heartbeats and results — holds no
plaintext on the server, and perdure reads the run back with the same key."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload, SearchAttributes
from temporalio.client import Client

import perdure
from perdure import RunStatus
from perdure import _encryption as encryption
from perdure._registry import open_backend
from perdure_temporal import TemporalUrl
from perdure_temporal.sealing import ENCODING
from perdure_temporal.testing import fresh_url

SECRETS = ("SECRET-INPUT-5711", "SECRET-RESULT-5712", "SECRET-SIGNAL-5713")


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    value = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv(encryption.KEY_ENV, f"t1:{value}")
    encryption.configure_keys(None)  # read the environment again
    yield value
    monkeypatch.delenv(encryption.KEY_ENV)
    encryption.configure_keys(None)


def payloads(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` anywhere inside ``message``, but search attributes' (the
    server indexes those: the run's status and workflow name, never its data)."""
    if isinstance(message, SearchAttributes):
        return
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            yield from payloads(value)
            continue
        # A repeated field, or a map (of messages, or of scalars).
        for item in value.values() if hasattr(value, "values") else value:
            if isinstance(item, Message):
                yield from payloads(item)


async def test_temporal_history_on_the_server_holds_no_plaintext(tmp_path: Path, key: str) -> None:
    import temporal_flows

    url = fresh_url(tmp_path)
    config = TemporalUrl.parse(url)
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(temporal_flows.sealed, (SECRETS[0],), {}, run_id="sealed")
        await backend.idle()
        await backend.signal("sealed", "go", {"note": SECRETS[2]}, by="ops")
        info = await backend.wait("sealed", timeout=60)
        assert info.status is RunStatus.SUCCEEDED
        assert perdure._backend.outcome(info) == {
            "found": f"{SECRETS[0]}:{SECRETS[1]}",
            "decision": {"note": SECRETS[2]},
        }
        assert [e.kind.value for e in await backend.history("sealed")][-1] == "run_succeeded"
    finally:
        await backend.close()

    # What the server holds, read with a client that has no codec and no key.
    raw = await Client.connect(config.target, namespace=config.namespace)
    handle = raw.get_workflow_handle(f"{config.id_prefix}sealed")
    events = [e async for e in handle.fetch_history_events()]
    described = (await handle.describe()).raw_description
    seen = 0
    for message in [*events, described]:
        data = message.SerializeToString()
        for secret in (*SECRETS, "secret_lookup"):
            assert secret.encode() not in data, (secret, message)
        for payload in payloads(message):
            assert payload.metadata["encoding"] == ENCODING, payload.metadata
            seen += 1
    # The walk saw them: at least the start's and one per update (each step's record).
    accepted = "workflow_execution_update_accepted_event_attributes"
    updates = [e for e in events if e.HasField(accepted)]
    assert seen > len(updates) >= 3


async def test_without_the_key_a_sealed_run_is_listed_as_corrupt_naming_the_key(
    tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import temporal_flows

    url = fresh_url(tmp_path)
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(temporal_flows.sealed, (SECRETS[0],), {}, run_id="sealed")
        await backend.idle()
    finally:
        await backend.close()
    monkeypatch.delenv(encryption.KEY_ENV)
    encryption.configure_keys(None)
    keyless = open_backend(url)
    await keyless.open()
    try:
        [listed] = await keyless.list_runs()
        assert listed.run_id == "sealed"
        assert listed.attention is not None and listed.attention["reason"] == "corrupt"
        assert "'t1'" in listed.attention["message"]
        with pytest.raises(perdure.SerializationError, match="sealed with perdure key 't1'"):
            await keyless.get_run("sealed")
    finally:
        await keyless.close()
    monkeypatch.setenv(encryption.KEY_ENV, f"t1:{key}")  # for the fixture's teardown
