"""DBOS serializer that stores JSON through perdure's safe serialization. No pickle."""

from __future__ import annotations

from typing import Any

from dbos import Serializer

from perdure.spi import (
    CorruptHistoryError,
    PerdureError,
    SerializationError,
    dumps,
    from_stored_layer,
    loads,
    to_jsonable,
)

EXC_TAG = "__perdure_exception__"


class StoredError(PerdureError):
    """An exception DBOS stored (a run's failure, a DBOS-internal error), rebuilt from JSON."""

    def __init__(self, error_type: str, message: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.error_message = message
        self.error = error or {"type": error_type, "message": message}
        #: What DBOS's portable JSON keeps of an exception (``{name, message, data}``).
        self.data = self.error


class CorruptValueError(SerializationError):
    """A value in DBOS's tables is not perdure JSON (edited, truncated or foreign)."""


class PickleRefusedError(CorruptValueError):
    """A DBOS row marked ``py_pickle`` (or a request to write one): refused unread."""


class ForeignRowError(CorruptHistoryError):
    """A row of DBOS's tables for a perdure run whose ``serialization`` is not one
    perdure decodes (``py_pickle``, an unknown name): refused before anything reads it."""

    def __init__(self, run_id: str, table: str, row: int | None, serialization: str) -> None:
        where = f"{table} row" + (f" #{row}" if row is not None else "")
        super().__init__(
            run_id,
            row,
            f"{where} is serialized as {serialization!r}, not perdure's JSON; refused unread "
            "(perdure never decodes pickle or a format it does not know)",
        )
        self.table = table
        self.row = row
        self.serialization = serialization


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
