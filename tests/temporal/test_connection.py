"""Connection settings as Temporal users set them; a payload codec over everything perdure
sends; payloads stored aside are checked against their SHA-256 when read."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.service import TLSConfig

import perdure
from perdure import RunStatus
from perdure._registry import open_backend
from perdure_temporal import PayloadError, TemporalUrl, use_payload_codec
from perdure_temporal.payloads import DirectoryPayloads
from perdure_temporal.testing import fresh_url


@pytest.fixture(autouse=True)
def no_temporal_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing from the machine's own Temporal configuration leaks into these tests."""
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "none.toml"))
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def _pem(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_mtls_files_are_read_into_temporal_tls_settings(tmp_path: Path) -> None:
    ca = _pem(tmp_path, "ca.pem", "CA")
    cert = _pem(tmp_path, "c.pem", "CERT")
    key = _pem(tmp_path, "k.pem", "KEY")
    url = (
        f"temporal://tc.example:7233/prod?tls_ca={ca}&tls_cert={cert}&tls_key={key}"
        "&tls_server_name=tc.example"
    )
    options = TemporalUrl.parse(url).connect_options()
    assert options["target_host"] == "tc.example:7233"
    assert options["namespace"] == "prod"
    assert options["tls"] == TLSConfig(
        server_root_ca_cert=b"CA",
        client_cert=b"CERT",
        client_private_key=b"KEY",
        domain="tc.example",
    )


def test_the_api_key_comes_from_the_variable_the_url_names_and_turns_tls_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_TEMPORAL_KEY", "s3cr3t-key")
    options = TemporalUrl.parse(
        "temporal://ns.tmprl.cloud:7233/ns.acct?api_key_env=MY_TEMPORAL_KEY"
    ).connect_options()
    assert options["api_key"] == "s3cr3t-key"
    assert options["tls"] is True


def test_an_api_key_in_the_url_is_refused_without_echoing_it() -> None:
    with pytest.raises(perdure.ConfigurationError) as err:
        TemporalUrl.parse("temporal://h:7233/ns?api_key=s3cr3t-key")
    assert "s3cr3t-key" not in str(err.value)


def test_an_unset_api_key_variable_is_a_configuration_error_naming_it() -> None:
    with pytest.raises(perdure.ConfigurationError, match=r"\$NO_SUCH_KEY"):
        TemporalUrl.parse("temporal://h:7233/ns?api_key_env=NO_SUCH_KEY").connect_options()


def test_a_client_certificate_without_its_key_is_a_configuration_error(tmp_path: Path) -> None:
    cert = _pem(tmp_path, "c.pem", "CERT")
    with pytest.raises(perdure.ConfigurationError, match="tls_key"):
        TemporalUrl.parse(f"temporal://h:7233/ns?tls_cert={cert}").connect_options()


def test_an_unreadable_key_file_names_the_file_not_its_contents(tmp_path: Path) -> None:
    with pytest.raises(perdure.ConfigurationError, match="tls_ca="):
        TemporalUrl.parse(f"temporal://h:7233/ns?tls_ca={tmp_path}/missing.pem").connect_options()


def test_a_temporal_envconfig_profile_supplies_address_and_api_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        '[profile.cloud]\naddress = "acct.tmprl.cloud:7233"\nnamespace = "acct"\n'
        'api_key = "from-profile"\n'
    )
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(config))
    options = TemporalUrl.parse("temporal:///acct?profile=cloud").connect_options()
    assert options["target_host"] == "acct.tmprl.cloud:7233"
    assert options["api_key"] == "from-profile"
    assert options["tls"] is True
    # The URL's host wins over the profile's.
    options = TemporalUrl.parse("temporal://other:7233/acct?profile=cloud").connect_options()
    assert options["target_host"] == "other:7233"


def test_temporal_variables_apply_like_for_any_temporal_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEMPORAL_API_KEY", "from-env")
    options = TemporalUrl.parse("temporal://h:7233/ns").connect_options()
    assert options["api_key"] == "from-env"


class _Marked(PayloadCodec):
    """Stands for an encrypting codec: what Temporal stores is not the plain payload."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(
                metadata={"encoding": b"binary/marked"},
                data=base64.b64encode(p.SerializeToString()),
            )
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for p in payloads:
            inner = Payload()
            inner.ParseFromString(base64.b64decode(p.data))
            out.append(inner)
        return out


@pytest.fixture
def marked() -> Iterator[None]:
    use_payload_codec(_Marked())
    try:
        yield
    finally:
        use_payload_codec(None)


async def test_a_payload_codec_encodes_what_temporal_stores_and_perdure_reads_it_back(
    marked: None, tmp_path: Path, flows: Any
) -> None:
    url = fresh_url(tmp_path)
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(flows.waits, (), {}, run_id="coded")
        await backend.idle()
        await backend.signal("coded", perdure.APPROVAL, {"pin": "pin-4711"}, by="ann")
        info = await backend.wait("coded", timeout=60)
        assert info.status is RunStatus.SUCCEEDED and info.result == {"pin": "pin-4711"}
        assert [e.kind for e in await backend.history("coded")][
            -1
        ] is perdure.EventKind.RUN_SUCCEEDED
    finally:
        await backend.close()
    config = TemporalUrl.parse(url)
    plain = await Client.connect(config.target, namespace=config.namespace)  # no codec
    handle = plain.get_workflow_handle(f"{config.id_prefix}coded")
    raw = b"".join([e.SerializeToString() async for e in handle.fetch_history_events()])
    assert b"binary/marked" in raw
    assert b"pin-4711" not in raw


def test_a_payload_changed_after_it_was_written_is_a_typed_error(tmp_path: Path) -> None:
    store = DirectoryPayloads(tmp_path)
    key = store.put(b"x" * 100_000)
    store.path(key).write_bytes(b"TAMPERED")
    with pytest.raises(PayloadError, match=key):
        store.get(key)


async def test_a_tampered_stored_aside_value_is_corrupt_history_naming_the_run_and_event(
    tmp_path: Path, flows: Any
) -> None:
    url = fresh_url(tmp_path, payload_threshold=0)
    backend = open_backend(url)
    await backend.open()
    try:
        await backend.start(flows.big_results, (1, 8), {}, run_id="tampered")
        assert (await backend.wait("tampered", timeout=60)).status is RunStatus.SUCCEEDED
        history = await backend.history("tampered")
        step = next(e for e in history if e.kind is perdure.EventKind.STEP_COMPLETED)
        for path in (tmp_path / "payloads").rglob("*"):
            if path.is_file() and path.stat().st_size > 8 * 1024:
                path.write_bytes(b'"TAMPERED"')  # valid JSON: only the hash can tell
        with pytest.raises(
            perdure.CorruptHistoryError, match="changed after it was written"
        ) as err:
            await backend.history("tampered")
        assert err.value.run_id == "tampered"
        assert err.value.seq == step.seq
    finally:
        await backend.close()
