"""Encryption at rest of recorded payloads: AES-256-GCM (the ``cryptography`` package).

Configured like the URL: ``PERDURE_ENCRYPTION_KEY`` (one key, or ``id:key,id:key``,
current first), else ``PERDURE_ENCRYPTION_KEY_FILE`` / ``[tool.perdure]
encryption_key_file`` (a file of ``id key`` lines, current first; ``#`` comments). A key
is 32 bytes given as base64 or hex; its id defaults to the first 8 hex digits of its
SHA-256. Every sealed value records the id of the key that sealed it, so keys rotate:
put the new key first and keep the old ones after it until no history uses them.

``seal(data)`` turns JSON data into an envelope ``{"__perdure__": "sealed", "k": id,
"n": nonce, "c": ciphertext}``; ``open_sealed`` reverses it. ``codec()`` is the raw
bytes primitive for substrates that encrypt their own payloads (Temporal's codec, the
LangGraph checkpoints).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from typing import Any

from perdure._errors import ConfigurationError, SerializationError
from perdure._key_material import KeySource, decode_key

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "Keyring", "configure_keys", "keyring"]

KEY_ENV = "PERDURE_ENCRYPTION_KEY"
KEY_FILE_ENV = "PERDURE_ENCRYPTION_KEY_FILE"
SEALED = "sealed"
_NONCE = 12


_SOURCE = KeySource(KEY_ENV, KEY_FILE_ENV, "encryption_key_file", "encryption key")


def _decode_key(raw: str, where: str) -> bytes:
    return decode_key(
        raw, where, what="an encryption key", fits=lambda key: len(key) == 32, size="32 bytes"
    )


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


@dataclass(frozen=True)
class Keyring:
    """Keys by id; the first one seals, any one opens what it sealed."""

    keys: tuple[tuple[str, bytes], ...]

    @classmethod
    def parse(cls, text: str, where: str) -> Keyring:
        """``key`` or ``id:key`` items separated by commas or lines (``id key`` too)."""
        keys: list[tuple[str, bytes]] = []
        for line in text.replace(",", "\n").splitlines():
            item = line.split("#", 1)[0].strip()
            if not item:
                continue
            kid, sep, raw = item.replace(" ", ":", 1).rpartition(":")
            if not sep:
                kid, raw = "", item
            key = _decode_key(raw, where)
            keys.append((kid.strip() or key_id(key), key))
        if not keys:
            raise ConfigurationError(f"{where}: no encryption key given")
        if importlib.util.find_spec("cryptography") is None:
            raise ConfigurationError(
                f"{where}: encryption needs the cryptography package: "
                "pip install 'perdure[encryption]'"
            )
        return cls(tuple(keys))

    @property
    def current(self) -> str:
        return self.keys[0][0]

    def _key(self, kid: str, where: str) -> bytes:
        for known, key in self.keys:
            if known == kid:
                return key
        raise SerializationError(
            f"{where}: sealed with key {kid!r}, which is not among the configured keys "
            f"({', '.join(k for k, _ in self.keys)}); add it to {KEY_ENV} / {KEY_FILE_ENV}"
        )

    def encrypt(self, plaintext: bytes, associated: bytes = b"") -> tuple[str, bytes]:
        """``(key id, nonce + ciphertext)`` of ``plaintext`` under the current key."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(_NONCE)
        kid, key = self.keys[0]
        return kid, nonce + AESGCM(key).encrypt(nonce, plaintext, associated)

    def decrypt(
        self, kid: str, blob: bytes, associated: bytes = b"", where: str = "value"
    ) -> bytes:
        """The plaintext ``encrypt`` sealed, or ``SerializationError`` (unknown key,
        tampered or truncated data)."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = self._key(kid, where)
        try:
            return AESGCM(key).decrypt(blob[:_NONCE], blob[_NONCE:], associated)
        except (InvalidTag, ValueError) as exc:
            raise SerializationError(
                f"{where}: sealed data does not authenticate under key {kid!r} "
                "(tampered, truncated or another key with this id)"
            ) from exc

    def seal(self, data: bytes) -> dict[str, Any]:
        kid, blob = self.encrypt(data)
        return {"k": kid, "c": base64.b64encode(blob).decode("ascii")}

    def unseal(self, envelope: dict[str, Any], where: str) -> bytes:
        kid, text = envelope.get("k"), envelope.get("c")
        if not isinstance(kid, str) or not isinstance(text, str):
            raise SerializationError(f"{where}: malformed sealed value (no key id or data)")
        try:
            blob = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SerializationError(f"{where}: sealed data is not base64") from exc
        return self.decrypt(kid, blob, where=where)


_lock = threading.Lock()
_configured: Keyring | None = None
_loaded = False


def configure_keys(keys: Keyring | str | None) -> None:
    """Set this process's keyring in code (``None``: back to the environment)."""
    global _configured, _loaded
    with _lock:
        _configured = Keyring.parse(keys, "configure_keys") if isinstance(keys, str) else keys
        _loaded = keys is not None


def keyring() -> Keyring | None:
    """The configured keyring, or None when payloads are stored in clear."""
    global _configured, _loaded
    if _loaded:
        return _configured
    with _lock:
        if not _loaded:
            _configured = _from_environment()
            _loaded = True
    return _configured


def _from_environment() -> Keyring | None:
    found = _SOURCE.text()
    return None if found is None else Keyring.parse(*found)
