"""Payloads stored aside: large values live outside Temporal's history.

Temporal keeps every update argument in the workflow's event history, which has a size
limit and is re-read on every replay. Values above ``payload_threshold`` bytes (model
responses, transcripts, big step results) are written here first and the history keeps
a reference: their SHA-256. Content addressing makes a write idempotent, so a driver
that loses its lease between writing a payload and appending its event can never
overwrite what the winner referenced — and it makes a read checkable: bytes whose
SHA-256 is not their key were changed after they were written, and reading them is a
``PayloadError``, never a value.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perdure_temporal.url import TemporalUrl


class PayloadError(Exception):
    """A payload stored aside is not what was written under its key."""


def verified(key: str, data: bytes, where: object) -> bytes:
    """``data`` if its SHA-256 is ``key``; else a ``PayloadError`` naming both."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != key:
        raise PayloadError(
            f"payload {key} in {where} was changed after it was written "
            f"(its {len(data)} bytes hash to {actual})"
        )
    return data


class PayloadStore(ABC):
    """Bytes by their SHA-256, written before any history references them."""

    @abstractmethod
    def put(self, data: bytes) -> str:
        """Store ``data`` durably; return its key (hex SHA-256)."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes stored under ``key``, checked against it; ``KeyError`` if there are
        none, ``PayloadError`` if they are not what was stored."""


class DirectoryPayloads(PayloadStore):
    """One file per payload under a directory (shared storage for several hosts)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise KeyError(key)
        return self.root / key[:2] / key

    def put(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        target = self.path(key)
        if target.exists():
            return key
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return key

    def get(self, key: str) -> bytes:
        try:
            data = self.path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None
        return verified(key, data, self)

    def __str__(self) -> str:
        return str(self.root)


def open_payloads(config: TemporalUrl) -> PayloadStore:
    """The payload store a URL's ``payloads=`` names: a ``postgresql://`` URL (shared by
    every host), else a directory (one host, or a shared filesystem)."""
    if config.payloads_url is not None:
        from perdure_temporal.pg_payloads import PostgresPayloads

        return PostgresPayloads(config.payloads_url)
    return DirectoryPayloads(config.payloads)
