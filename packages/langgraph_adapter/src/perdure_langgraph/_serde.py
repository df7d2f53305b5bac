"""The checkpointer's serializer: msgpack with LangGraph's strict allow-list, never pickle."""

from __future__ import annotations

import base64
import binascii
import importlib.util
import os

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from perdure.errors import ConfigurationError

#: Environment variable holding the AES key (16, 24 or 32 bytes: raw, hex or base64).
KEY_ENV = "PERDURE_LANGGRAPH_KEY"

_AES_SIZES = (16, 24, 32)


def strict_serializer() -> JsonPlusSerializer:
    """``JsonPlusSerializer`` without pickle, decoding only LangGraph's safe msgpack types.

    ``StateGraph.compile`` widens the allow-list with the types named by the graph's
    state schema (``BaseCheckpointSaver.with_allowlist``); nothing else is revived.
    """
    return JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)


def parse_key(raw: str) -> bytes:
    """Decode an AES key given raw (16/24/32 characters), as hex, or as base64."""
    candidates: list[bytes] = [raw.encode()]
    try:
        candidates.append(bytes.fromhex(raw))
    except ValueError:
        pass
    try:
        candidates.append(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError):
        pass
    for key in candidates:
        if len(key) in _AES_SIZES:
            return key
    raise ConfigurationError(
        f"{KEY_ENV} must be an AES key of 16, 24 or 32 bytes, given raw, as hex or as "
        f"base64; the value set has {len(raw)} characters and decodes to none of these"
    )


def default_serializer(key: str | None = None) -> SerializerProtocol:
    """The strict serializer, wrapped in AES encryption when a key is given or in the env."""
    raw = key if key is not None else os.environ.get(KEY_ENV)
    if not raw:
        return strict_serializer()
    aes_key = parse_key(raw)
    if importlib.util.find_spec("Crypto") is None:
        raise ConfigurationError(
            f"{KEY_ENV} is set, so checkpoints must be encrypted, but pycryptodome is not "
            "installed: install it (pip install pycryptodome) or unset the variable"
        )
    return EncryptedSerializer.from_pycryptodome_aes(strict_serializer(), key=aes_key)
