"""Checkpoint payloads encrypted at rest with perdure's own keys (``perdure.spi.keyring``).

With ``PERDURE_ENCRYPTION_KEY`` (or a key file) configured, every payload the saver
writes — channel values, pending writes, checkpoint headers with their inline values —
is sealed with AES-256-GCM under the current key before it reaches the SQL row. The row's
``type`` column then reads ``<serializer type>+aesgcm:<key id>``: the key that sealed it
is recorded, so keys rotate as they do for run histories (new key first, old ones kept
until no row names them), and the serializer type is bound to the ciphertext as
associated data, so a row cannot be relabelled. Rows written in clear (before a key was
configured) still read. The metadata column stays clear JSON, as in LangGraph's savers,
because ``list(filter=...)`` queries it.
"""

from __future__ import annotations

from perdure.spi import KEY_ENV, KEY_FILE_ENV, SerializationError, keyring

#: Marks a sealed type: ``msgpack+aesgcm:1a2b3c4d``.
SEALED_MARK = "+aesgcm:"
#: What LangGraph's ``EncryptedSerializer`` (the retired ``PERDURE_LANGGRAPH_KEY``) wrote.
_RETIRED = "+aes"


def seal(type_: str, payload: bytes) -> tuple[str, bytes]:
    """``(type, payload)`` sealed under the current key, or as is when no key is set."""
    ring = keyring()
    if ring is None:
        return type_, payload
    kid, blob = ring.encrypt(payload, associated=type_.encode())
    return f"{type_}{SEALED_MARK}{kid}", blob


def unseal(type_: str, payload: bytes, where: str) -> tuple[str, bytes]:
    """The serializer's ``(type, payload)`` of a stored row; ``SerializationError`` when it
    is sealed and cannot be opened (no key, unknown key id, tampered data)."""
    inner, mark, kid = type_.partition(SEALED_MARK)
    if not mark:
        if type_.endswith(_RETIRED):
            raise SerializationError(
                f"{where} was encrypted with PERDURE_LANGGRAPH_KEY, which perdure no longer "
                f"reads; checkpoints are now sealed with {KEY_ENV}"
            )
        return type_, payload
    ring = keyring()
    if ring is None:
        raise SerializationError(
            f"{where} is encrypted (key {kid!r}) and no key is configured: set "
            f"{KEY_ENV} or {KEY_FILE_ENV}"
        )
    return inner, ring.decrypt(kid, payload, associated=inner.encode(), where=where)
