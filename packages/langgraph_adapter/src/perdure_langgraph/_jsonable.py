"""Turn decoded channel values into JSON-friendly data for thread exports."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePath
from typing import Any

_MAX_DEPTH = 64


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """A JSON-serializable rendering of ``value`` (lossy for exotic types, never raises)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth > _MAX_DEPTH:
        return {"__repr__": repr(value)}
    depth = _depth + 1
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, depth)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, depth) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset) or type(value).__name__ == "deque":
        return [to_jsonable(v, depth) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID | Decimal | PurePath):
        return str(value)
    snapshot_value = getattr(value, "value", None)
    if type(value).__name__ == "_DeltaSnapshot":
        return {"__delta_snapshot__": to_jsonable(snapshot_value, depth)}
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        try:
            return to_jsonable(model_dump(mode="json"), depth)
        except Exception:
            pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {f.name: to_jsonable(getattr(value, f.name), depth) for f in fields}
    slots = getattr(type(value), "__slots__", None)
    if isinstance(slots, tuple) and slots and all(hasattr(value, s) for s in slots):
        return {s: to_jsonable(getattr(value, s), depth) for s in slots}
    return {"__repr__": repr(value)}
