"""Safe, explicit serialization: JSON values, dataclasses and pydantic models. No pickle.

``to_jsonable`` turns a value into plain JSON data; ``from_jsonable`` reverses it.
Dataclasses and pydantic models are tagged with their import path and rebuilt only if
that path names a dataclass or a pydantic model, so stored data can never make us call
an arbitrary constructor.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import importlib
import json
from typing import Any

from perdure.errors import SerializationError

TAG = "__perdure__"

try:  # pydantic is a dependency of perdure, but keep the import local to one place
    from pydantic import BaseModel as _BaseModel
except ImportError:  # pragma: no cover
    _BaseModel = None


def _type_path(tp: type, where: str) -> str:
    if "<locals>" in tp.__qualname__:
        raise SerializationError(
            f"{where}: {tp.__qualname__} is defined inside a function, so it could not be "
            "rebuilt on replay; define it at module level"
        )
    return f"{tp.__module__}:{tp.__qualname__}"


def to_jsonable(value: Any, where: str = "value") -> Any:
    """Return ``value`` as JSON data, or raise ``SerializationError`` naming ``where``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {TAG: "float", "v": repr(value)}
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():  # pyright: ignore[reportUnknownVariableType]
            if not isinstance(k, str):
                raise SerializationError(
                    f"{where}: dict key {k!r} is a {type(k).__name__}; only str keys are stored"  # pyright: ignore[reportUnknownArgumentType]
                )
            out[k] = to_jsonable(v, f"{where}[{k!r}]")
        if TAG in out:
            return {TAG: "dict", "v": out}
        return out
    if isinstance(value, (list, tuple)):
        items = [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        return items if isinstance(value, list) else {TAG: "tuple", "v": items}
    if isinstance(value, bytes):
        return {TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if _BaseModel is not None and isinstance(value, _BaseModel):
        path = _type_path(type(value), where)
        try:
            dumped = value.model_dump(mode="json")
        except Exception as exc:
            raise SerializationError(f"{where}: cannot dump {path}: {exc}") from exc
        return {TAG: "pydantic", "t": path, "v": to_jsonable(dumped, where)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: to_jsonable(getattr(value, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(value)
        }
        return {TAG: "dataclass", "t": _type_path(type(value), where), "v": fields}
    raise SerializationError(
        f"{where}: cannot store a {type(value).__module__}.{type(value).__qualname__}; "
        "return JSON-compatible data, a dataclass or a pydantic model"
    )


def _resolve(path: str, where: str) -> type:
    module_name, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise SerializationError(
            f"{where}: stored type {path!r} cannot be imported: {exc}"
        ) from exc
    if not isinstance(obj, type):
        raise SerializationError(f"{where}: stored type {path!r} is not a class")
    return obj


def from_jsonable(data: Any, where: str = "value") -> Any:
    """Rebuild a value written by ``to_jsonable``."""
    if isinstance(data, list):
        return [from_jsonable(v, where) for v in data]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(data, dict):
        return data
    tag: Any = data.get(TAG)  # pyright: ignore[reportUnknownMemberType]
    if tag is None:
        return {k: from_jsonable(v, where) for k, v in data.items()}  # pyright: ignore[reportUnknownVariableType]
    v: Any = data.get("v")  # pyright: ignore[reportUnknownMemberType]
    try:
        if tag == "dict":
            return {k: from_jsonable(x, where) for k, x in v.items()}
        if tag == "tuple":
            return tuple(from_jsonable(x, where) for x in v)
        if tag == "bytes":
            return base64.b64decode(v, validate=True)
        if tag == "datetime":
            return dt.datetime.fromisoformat(v)
        if tag == "float":
            return float(v)
        if tag == "pydantic":
            tp = _resolve(data["t"], where)
            if _BaseModel is None or not issubclass(tp, _BaseModel):
                raise SerializationError(f"{where}: {data['t']!r} is not a pydantic model")
            return tp.model_validate(from_jsonable(v, where))
        if tag == "dataclass":
            tp = _resolve(data["t"], where)
            if not dataclasses.is_dataclass(tp):
                raise SerializationError(f"{where}: {data['t']!r} is not a dataclass")
            kwargs = {k: from_jsonable(x, where) for k, x in v.items()}
            init = {f.name for f in dataclasses.fields(tp) if f.init}
            obj = tp(**{k: x for k, x in kwargs.items() if k in init})
            for k, x in kwargs.items():
                if k not in init:
                    object.__setattr__(obj, k, x)
            return obj
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"{where}: cannot decode a stored {tag!r} value: {exc}") from exc
    raise SerializationError(f"{where}: unknown stored value tag {tag!r}")


def dumps(data: Any) -> str:
    """JSON text of already-jsonable data (compact, UTF-8 kept)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads(text: str | bytes) -> Any:
    return json.loads(text)
