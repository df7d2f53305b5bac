"""Temporal payloads sealed with perdure's own keyring (``perdure.spi.keyring``).

With ``PERDURE_ENCRYPTION_KEY`` (or a key file) configured, every payload perdure sends
to Temporal — the run's start, each step's record, signals, memos, heartbeats, drive
inputs and results — is one AES-256-GCM envelope under the current key before it leaves
the process, so the server's history holds no plaintext, and the same key that seals
perdure's records on the other backends opens it. Each payload records its key id in
its metadata, so keys rotate as they do everywhere else (new key first, old ones after
it). A payload without the envelope (written before a key was configured) passes as it
is; one sealed with a key not configured (or with no key configured at all), or
tampered with, is a ``SerializationError`` naming the key id it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from perdure.spi import KEY_ENV, KEY_FILE_ENV, Keyring, SerializationError

__all__ = ["ENCODING", "KeyringCodec"]

#: The ``encoding`` metadata of a sealed payload.
ENCODING = b"binary/perdure-sealed"
_KEY = "perdure-key"


class KeyringCodec(PayloadCodec):
    """Seals each payload whole (metadata and data) under the keyring's current key;
    without a keyring, passes payloads through and refuses to open sealed ones."""

    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if self.keyring is None:
            return list(payloads)
        out: list[Payload] = []
        for payload in payloads:
            kid, blob = self.keyring.encrypt(payload.SerializeToString(), ENCODING)
            out.append(Payload(metadata={"encoding": ENCODING, _KEY: kid.encode()}, data=blob))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out: list[Payload] = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                out.append(payload)
                continue
            kid = payload.metadata.get(_KEY, b"").decode("ascii", "replace")
            if self.keyring is None:
                raise SerializationError(
                    f"a Temporal payload is sealed with perdure key {kid!r}, and no key is "
                    f"configured: set {KEY_ENV} (or {KEY_FILE_ENV}) as the workers have it"
                )
            plain = self.keyring.decrypt(kid, payload.data, ENCODING, "Temporal payload")
            out.append(Payload.FromString(plain))
        return out
