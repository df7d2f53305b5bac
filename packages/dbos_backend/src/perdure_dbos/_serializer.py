"""DBOS serializer that stores JSON through perdure's safe serialization. No pickle."""

from __future__ import annotations

from typing import Any

from dbos._serialization import Serializer

from perdure.errors import PerdureError, SerializationError
from perdure.serialization import dumps, from_stored_layer, loads, to_jsonable

EXC_TAG = "__perdure_exception__"


class StoredError(PerdureError):
    """An exception DBOS stored (a run's failure, a DBOS-internal error), rebuilt from JSON."""

    def __init__(self, error_type: str, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.error_message = message
        self.error = error or {"type": error_type, "message": message}


class CorruptValueError(SerializationError):
    """A value in DBOS's tables is not perdure JSON (edited, truncated or foreign)."""


class JsonSerializer(Serializer):
    """Values as perdure JSON; exceptions as ``{type, message, error}`` records."""

    def serialize(self, data: Any) -> str:
        if isinstance(data, BaseException):
            error = getattr(data, "error", None)
            data = {
                EXC_TAG: {
                    "type": getattr(data, "error_type", type(data).__name__),
                    "message": getattr(data, "error_message", str(data)),
                    "error": error if isinstance(error, dict) else None,
                }
            }
        return dumps(to_jsonable(data, "value stored by DBOS"))

    def deserialize(self, serialized_data: str) -> Any:
        try:
            value = from_stored_layer(loads(serialized_data), "value stored by DBOS")
        except (ValueError, SerializationError) as exc:
            raise CorruptValueError(f"{type(exc).__name__}: {exc}") from None
        if isinstance(value, dict) and EXC_TAG in value:
            info: dict[str, Any] = value[EXC_TAG]  # pyright: ignore[reportUnknownVariableType]
            return StoredError(str(info.get("type")), str(info.get("message")), info.get("error"))
        return value

    def name(self) -> str:
        return "perdure_json"
