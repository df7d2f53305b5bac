"""Finding 6 (encryption at rest): with a key configured, nothing a run records is
readable without it, on every backend; ``runs show``/``export`` decrypt only with it;
keys rotate by id.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

import perdure
from perdure import RunStatus, SerializationError, encryption
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
    assert perdure.backend.outcome(info) == {
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

    # Rotation: a new current key, the old one kept after it, still opens old runs.
    rotated = f"k2:{keys['k2']},k1:{keys['k1']}"
    shown = processes.cli("runs", "export", "enc-1", env={encryption.KEY_ENV: rotated})
    assert shown.returncode == 0 and SECRETS[1] in shown.stdout


def test_without_the_key_a_sealed_value_is_shown_as_encrypted_with_its_key_id(
    keys: dict[str, str],
) -> None:
    from perdure.serialization import reveal, to_jsonable

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
    from perdure.serialization import from_jsonable, to_jsonable

    sealed = to_jsonable({"card": "4111"})
    encryption.configure_keys(f"k2:{keys['k2']}")
    with pytest.raises(SerializationError, match="sealed with key 'k1'"):
        from_jsonable(sealed)
    encryption.configure_keys(f"k2:{keys['k2']},k1:{keys['k1']}")
    assert from_jsonable(sealed) == {"card": "4111"}
    assert to_jsonable(1)["k"] == "k2"  # the first key seals


def test_tampered_sealed_data_is_a_typed_error(keys: dict[str, str]) -> None:
    from perdure.serialization import from_jsonable, to_jsonable

    sealed = to_jsonable({"card": "4111"})
    blob = bytearray(base64.b64decode(sealed["c"]))
    blob[-1] ^= 1
    with pytest.raises(SerializationError, match="does not authenticate"):
        from_jsonable({**sealed, "c": base64.b64encode(bytes(blob)).decode()})
    with pytest.raises(SerializationError, match="malformed sealed"):
        from_jsonable({"__perdure__": "sealed", "k": "k1"})
