"""Checkpoint headers stored whole or as a delta against an earlier ("base") checkpoint.

A checkpoint's header is everything but its large channel values: ``channel_versions``,
``versions_seen``, the inline scalar ``channel_values`` and a few small fields. From one
superstep to the next only a handful of entries of those three maps change, so most rows
store just the changes against the last checkpoint stored whole in the same thread and
namespace (one level: a base is never itself a delta). Rows stay small; reading one costs
at most one extra row.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from perdure.spi import PerdureError

#: The three maps a delta records changes of, in this order.
MAPS = ("channel_versions", "versions_seen", "channel_values")
DELTA_KEY = "__perdure_delta__"
#: Store whole again after this many deltas against one base...
MAX_DELTAS_PER_BASE = 32
#: ... or once the changes reach this share of the entries (but never below a floor).
MAX_DELTA_SHARE = 3
MIN_DELTA_BUDGET = 16

Maps = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


class CorruptCheckpointError(PerdureError):
    """A stored checkpoint cannot be read back (for example its base row is gone)."""


_MISSING = object()


def diff(base: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Entries of ``current`` that differ from ``base`` (by type and value), and the keys
    ``base`` has in excess."""
    get = base.get
    changed = {
        k: v
        for k, v in current.items()
        if (b := get(k, _MISSING)) is not v and (type(b) is not type(v) or b != v)
    }
    return changed, [k for k in base.keys() - current.keys()]


def _diff_versions(
    base: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """:func:`diff` for channel versions (hashable values; ``1`` and ``1.0`` are one version)."""
    return dict(current.items() - base.items()), [k for k in base.keys() - current.keys()]


def apply(
    base: Mapping[str, Any], changed: Mapping[str, Any], removed: list[str]
) -> dict[str, Any]:
    """Rebuild a map from its base and a :func:`diff`."""
    result = dict(base)
    result.update(changed)
    for key in removed:
        result.pop(key, None)
    return result


def split(stored: dict[str, Any]) -> tuple[dict[str, Any], Maps]:
    """A whole stored header as (small fields, the three maps)."""
    rest = {k: v for k, v in stored.items() if k not in MAPS}
    maps = (
        stored.get("channel_versions") or {},
        stored.get("versions_seen") or {},
        stored.get("channel_values") or {},
    )
    return rest, maps


def encode_delta(rest: dict[str, Any], base: Maps, maps: Maps) -> dict[str, Any] | None:
    """The delta record for ``maps`` against ``base``, or ``None`` if it would be too big."""
    parts: list[Any] = []
    size = 0
    total = 0
    for i, (base_map, current) in enumerate(zip(base, maps, strict=True)):
        try:
            changed, removed = (
                _diff_versions(base_map, current) if i == 0 else diff(base_map, current)
            )
        except TypeError:  # an unhashable version
            changed, removed = diff(base_map, current)
        parts += [changed, removed]
        size += len(changed) + len(removed)
        total += len(current)
    if size > max(MIN_DELTA_BUDGET, total // MAX_DELTA_SHARE):
        return None
    return {**rest, DELTA_KEY: parts}


def metadata(raw: Any, where: str) -> dict[str, Any]:
    """A row's metadata column (JSON text on SQLite, JSONB on PostgreSQL) as a dict."""
    if isinstance(raw, dict):
        return cast(dict[str, Any], raw)
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"{where}: its metadata is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CorruptCheckpointError(f"{where}: its metadata is not a JSON object")
    return cast(dict[str, Any], value)


def check_stored(stored: Any, where: str) -> dict[str, Any]:
    """``stored`` (a decoded header row) if it has the shape :func:`decode` reads, else
    :class:`CorruptCheckpointError` naming ``where``: a whole header's maps are maps
    (``versions_seen`` of maps), a delta's changes come in (map, list) pairs."""
    if not isinstance(stored, dict) or not all(isinstance(k, str) for k in stored):
        raise CorruptCheckpointError(f"{where} is not a checkpoint header: {type(stored).__name__}")
    header: dict[str, Any] = stored
    if DELTA_KEY in header:
        parts = header[DELTA_KEY]
        if (
            not isinstance(parts, list)
            or len(parts) != 2 * len(MAPS)
            or not all(isinstance(p, dict) for p in parts[0::2])
            or not all(isinstance(p, list) for p in parts[1::2])
            or not all(isinstance(k, str) for p in parts[1::2] for k in p)
            or not all(isinstance(v, dict) for v in parts[2].values())
        ):
            raise CorruptCheckpointError(f"{where}: its delta record is malformed")
        return header
    for name in MAPS:
        value = header.get(name)
        if not isinstance(value, dict):
            raise CorruptCheckpointError(f"{where}: {name} is a {type(value).__name__}, not a map")
    if not all(isinstance(v, dict) for v in header["versions_seen"].values()):
        raise CorruptCheckpointError(f"{where}: versions_seen holds a value that is not a map")
    return header


def is_delta(stored: Mapping[str, Any]) -> bool:
    """Whether a decoded header is a delta record."""
    return DELTA_KEY in stored


def decode(stored: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """A whole header from a stored record (and its decoded, whole base for a delta)."""
    if DELTA_KEY not in stored:
        return stored
    if base is None or DELTA_KEY in base:
        raise CorruptCheckpointError(
            f"checkpoint {stored.get('id')!r} is stored as a delta but its base row is "
            + ("missing" if base is None else "itself a delta")
        )
    parts = stored[DELTA_KEY]
    header = {k: v for k, v in stored.items() if k != DELTA_KEY}
    for i, name in enumerate(MAPS):
        header[name] = apply(base.get(name) or {}, parts[2 * i], parts[2 * i + 1])
    # fresh inner dicts: rebuilt checkpoints must not share them
    header["versions_seen"] = {k: dict(v) for k, v in header["versions_seen"].items()}
    return header


@dataclass(slots=True)
class Head:
    """The last checkpoint this process stored for a (thread, namespace)."""

    checkpoint_id: str
    base_id: str
    base: Maps
    deltas: int


class HeadCache:
    """What :class:`Head` each recently written (thread, namespace) has; LRU-bounded."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._heads: OrderedDict[tuple[str, str], Head] = OrderedDict()

    def base_for(self, key: tuple[str, str], parent_id: str | None, new_id: str) -> Head | None:
        """The head to write a delta against, when ``new_id`` continues from it."""
        with self._lock:
            head = self._heads.get(key)
        if (
            head is None
            or parent_id is None
            or head.checkpoint_id != parent_id
            or head.deltas >= MAX_DELTAS_PER_BASE
            or new_id == head.base_id
        ):
            return None
        return head

    def remember(self, key: tuple[str, str], head: Head) -> None:
        """Record a successful write."""
        with self._lock:
            self._heads[key] = head
            self._heads.move_to_end(key)
            while len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (after maintenance that may delete bases)."""
        with self._lock:
            self._heads.clear()


def copy_maps(maps: Maps) -> Maps:
    """Private copies of the three maps, to keep as a base."""
    return (dict(maps[0]), {k: dict(v) for k, v in maps[1].items()}, dict(maps[2]))


def thread_lock_key(namespace: str, thread_id: str) -> int:
    """A 64-bit advisory lock key for one thread (PostgreSQL)."""
    digest = hashlib.blake2b(f"{namespace}\0{thread_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
