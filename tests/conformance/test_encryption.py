"""Finding 6 (encryption at rest): with a key configured, nothing a run records is
readable without it, on every backend; what an operator sees or exports (``runs
show``/``export``, ``runs prune --export``, the console's run page and export) is
decrypted only with it; keys rotate by id.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import perdure
from perdure import RunStatus, SerializationError
from perdure import _encryption as encryption
from perdure._console import ConsoleSettings, create_app
from perdure.testing import Processes

SECRETS = ("SECRET-INPUT-4711", "SECRET-RESULT-4712", "SECRET-SIGNAL-4713")


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@perdure.step
async def lookup(order: str) -> str:
    return f"{order}:SECRET-RESULT-4712"


@perdure.workflow(name="encryption.flow")
async def flow(order: str) -> dict[str, Any]:
    found = await lookup(order)
    decision = await perdure.wait_for_signal("go", details={"order": order})
    return {"found": found, "decision": decision}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    ring = {"k1": _key(), "k2": _key()}
    monkeypatch.setenv(encryption.KEY_ENV, f"k1:{ring['k1']}")
    encryption.configure_keys(None)  # read the environment again
    yield ring
    monkeypatch.delenv(encryption.KEY_ENV)
    encryption.configure_keys(None)


async def _finished_run(backend: Any, run_id: str) -> None:
    await backend.start(flow, (SECRETS[0],), {}, run_id=run_id)
    await backend.idle()
    await backend.signal(run_id, "go", {"note": SECRETS[2]}, by="ops")
    info = await backend.wait(run_id, timeout=60)
    assert info.status is RunStatus.SUCCEEDED


async def _console_pages(backend: Any, run_id: str) -> str:
    """The run list, run page and JSONL export of a logged-in console operator."""
    app = create_app(ConsoleSettings(secret="encryption-console-secret", backend=backend))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        form = await client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf, form.text
        login = {"csrf": csrf[1], "name": "dana", "secret": "encryption-console-secret"}
        assert (await client.post("/login", data=login)).status_code == 303
        pages = [await client.get(path) for path in ("/", f"/runs/{run_id}")]
        pages.append(await client.get(f"/export/{run_id}"))
    for page in pages:
        assert page.status_code == 200, page.text
    return "\n".join(page.text for page in pages)


def _recorded(info: Any, events: list[Any]) -> str:
    return json.dumps([info.to_json(), [e.to_json() for e in events]], default=str)


async def test_what_a_run_records_is_sealed_and_opens_only_with_the_key(
    perdure_backend: Any, processes: Processes, keys: dict[str, str]
) -> None:
    await perdure_backend.start(flow, (SECRETS[0],), {}, run_id="enc-1")
    await perdure_backend.idle()
    await perdure_backend.signal("enc-1", "go", {"note": SECRETS[2]}, by="ops")
    info = await perdure_backend.wait("enc-1", timeout=60)
    assert info.status is RunStatus.SUCCEEDED
    assert perdure._backend.outcome(info) == {
        "found": f"{SECRETS[0]}:{SECRETS[1]}",
        "decision": {"note": SECRETS[2]},
    }
    # What the backend stored (its own read API returns the recorded data as stored).
    recorded = _recorded(info, await perdure_backend.history("enc-1"))
    for secret in SECRETS:
        assert secret not in recorded
    assert '"k": "k1"' in recorded  # each envelope names its key

    with_key = processes.cli(
        "runs", "export", "enc-1", env={encryption.KEY_ENV: f"k1:{keys['k1']}"}
    )
    assert with_key.returncode == 0, with_key.stderr
    for secret in SECRETS:
        assert secret in with_key.stdout

    without = processes.cli("runs", "show", "enc-1", env={encryption.KEY_ENV: ""})
    assert without.returncode == 0, without.stderr
    for secret in SECRETS:
        assert secret not in without.stdout + without.stderr

    # The console shows an operator what the key opens, and only with the key.
    for secret in SECRETS:
        assert secret in (await _console_pages(perdure_backend, "enc-1"))
    encryption.configure_keys(None)
    os.environ.pop(encryption.KEY_ENV)
    pages = await _console_pages(perdure_backend, "enc-1")
    for secret in SECRETS:
        assert secret not in pages
    assert "encrypted" in pages
    os.environ[encryption.KEY_ENV] = f"k1:{keys['k1']}"
    encryption.configure_keys(None)

    # Rotation: a new current key, the old one kept after it, still opens old runs.
    rotated = f"k2:{keys['k2']},k1:{keys['k1']}"
    shown = processes.cli("runs", "export", "enc-1", env={encryption.KEY_ENV: rotated})
    assert shown.returncode == 0 and SECRETS[1] in shown.stdout


async def test_prune_exports_what_the_key_opens_and_only_with_the_key(
    perdure_backend: Any, processes: Processes, keys: dict[str, str], tmp_path: Path
) -> None:
    """Each prune deletes the run it exports: one without the key, then one with it."""
    for run_id, key in (("enc-prune-1", ""), ("enc-prune-2", f"k1:{keys['k1']}")):
        await _finished_run(perdure_backend, run_id)
        folder = tmp_path / run_id
        pruned = processes.cli(
            "runs", "prune", "--older-than", "0s", "--export", str(folder),
            env={encryption.KEY_ENV: key},
        )  # fmt: skip
        assert pruned.returncode == 0, pruned.stderr
        exported = "".join(p.read_text() for p in folder.glob("*.jsonl"))
        assert run_id in exported
        for secret in SECRETS:
            assert (secret in exported) is bool(key)


def test_without_the_key_a_sealed_value_is_shown_as_encrypted_with_its_key_id(
    keys: dict[str, str],
) -> None:
    from perdure._serialization import reveal, to_jsonable

    sealed = to_jsonable({"card": "4111"})
    assert reveal({"result": sealed}) == {"result": {"card": "4111"}}
    encryption.configure_keys(None)
    os.environ.pop(encryption.KEY_ENV)
    encryption.configure_keys(None)
    assert reveal({"result": sealed}) == {
        "result": {"__perdure__": "sealed", "k": "k1", "encrypted": True}
    }
    os.environ[encryption.KEY_ENV] = "restored-by-the-fixture"


def test_data_sealed_with_a_retired_key_is_a_typed_error_naming_it(keys: dict[str, str]) -> None:
    from perdure._serialization import from_jsonable, to_jsonable

    sealed = to_jsonable({"card": "4111"})
    encryption.configure_keys(f"k2:{keys['k2']}")
    with pytest.raises(SerializationError, match="sealed with key 'k1'"):
        from_jsonable(sealed)
    encryption.configure_keys(f"k2:{keys['k2']},k1:{keys['k1']}")
    assert from_jsonable(sealed) == {"card": "4111"}
    assert to_jsonable(1)["k"] == "k2"  # the first key seals


def test_tampered_sealed_data_is_a_typed_error(keys: dict[str, str]) -> None:
    from perdure._serialization import from_jsonable, to_jsonable

    sealed = to_jsonable({"card": "4111"})
    blob = bytearray(base64.b64decode(sealed["c"]))
    blob[-1] ^= 1
    with pytest.raises(SerializationError, match="does not authenticate"):
        from_jsonable({**sealed, "c": base64.b64encode(bytes(blob)).decode()})
    with pytest.raises(SerializationError, match="malformed sealed"):
        from_jsonable({"__perdure__": "sealed", "k": "k1"})


def test_keys_come_from_a_key_file_current_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from perdure._errors import ConfigurationError

    new, old = _key(), _key()
    key_file = tmp_path / "keys"
    key_file.write_text(f"# rotated today\nk2 {new}\nk1 {old}\n")
    monkeypatch.delenv(encryption.KEY_ENV, raising=False)
    monkeypatch.setenv(encryption.KEY_FILE_ENV, str(key_file))
    encryption.configure_keys(None)
    try:
        ring = encryption.keyring()
        assert ring is not None and [kid for kid, _ in ring.keys] == ["k2", "k1"]
        monkeypatch.setenv(encryption.KEY_FILE_ENV, str(tmp_path / "missing"))
        encryption.configure_keys(None)
        with pytest.raises(ConfigurationError, match="cannot read the encryption key file"):
            encryption.keyring()
        key_file.write_text("k3 not-a-key\n")
        monkeypatch.setenv(encryption.KEY_FILE_ENV, str(key_file))
        encryption.configure_keys(None)
        with pytest.raises(ConfigurationError, match="must be 32 bytes") as refused:
            encryption.keyring()
        assert "not-a-key" not in str(refused.value)
    finally:
        monkeypatch.delenv(encryption.KEY_FILE_ENV)
        encryption.configure_keys(None)
