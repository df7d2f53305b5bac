"""Safe, explicit serialization: JSON values, dataclasses and pydantic models. No pickle.

``to_jsonable`` turns a value into plain JSON data; ``from_jsonable`` reverses it.
Dataclasses and pydantic models are tagged with their ``module:qualname`` and rebuilt
only from the explicit type registry (``perdure._type_registry``): decoding never imports
a module and never builds a class the program did not declare, and sets only the fields
the class declares.
"""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import datetime as dt
import json
import sys
from typing import Any, cast

from perdure import _encryption as encryption
from perdure import _redaction as redaction
from perdure import _type_registry as type_registry
from perdure._errors import SerializationError

TAG = "__perdure__"


def _pydantic_base() -> type[Any] | None:
    """pydantic's BaseModel if pydantic is loaded. A value can only be a model if its
    class was imported, so we never pay pydantic's import time ourselves."""
    module = sys.modules.get("pydantic")
    return None if module is None else cast(type[Any], module.BaseModel)


def _type_path(tp: type, where: str) -> str:
    if "<locals>" in tp.__qualname__:
        raise SerializationError(
            f"{where}: {tp.__qualname__} is defined inside a function, so it could not be "
            "rebuilt on replay; define it at module level"
        )
    type_registry.remember(tp)
    return type_registry.type_path(tp)


#: The deepest nesting of containers (dicts, lists, tuples, dataclasses, models) a stored
#: value may have. Enforced when a value is written, so everything written reads back
#: (a decoder recursing through 700 levels would fail every replay instead).
MAX_DEPTH = 100


def to_jsonable(value: Any, where: str = "value", *, hits: list[str] | None = None) -> Any:
    """Return ``value`` as JSON data, or raise ``SerializationError`` naming ``where``:
    also for a value nested deeper than ``MAX_DEPTH`` or one that contains itself.

    The redaction policy (``perdure._redaction``) is applied first; the rules that
    matched are appended to ``hits``. With an encryption key configured
    (``perdure._encryption``), the data is then sealed: one AES-GCM envelope recording
    the key id, opened again by ``from_jsonable``.
    """
    data = redaction.redact(_encode(value, where, 0, set()), hits)
    ring = encryption.keyring()
    if ring is None:
        return data
    return {TAG: encryption.SEALED, **ring.seal(dumps(data).encode())}


def _encode(value: Any, where: str, depth: int, path: set[int]) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {TAG: "float", "v": repr(value)}
        return value
    if isinstance(value, bytes):
        return {TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if depth >= MAX_DEPTH:
        raise SerializationError(
            f"{where}: nested deeper than {MAX_DEPTH} levels, the most a stored value may "
            "have; flatten it"
        )
    if id(value) in path:
        raise SerializationError(f"{where}: the value contains itself (a reference cycle)")
    path.add(id(value))
    try:
        return _encode_container(value, where, depth + 1, path)
    finally:
        path.discard(id(value))


def _encode_container(value: Any, where: str, depth: int, path: set[int]) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():  # pyright: ignore[reportUnknownVariableType]
            if not isinstance(k, str):
                raise SerializationError(
                    f"{where}: dict key {k!r} is a {type(k).__name__}; only str keys are stored"  # pyright: ignore[reportUnknownArgumentType]
                )
            out[k] = _encode(v, f"{where}[{k!r}]", depth, path)
        if TAG in out:
            return {TAG: "dict", "v": out}
        return out
    if isinstance(value, (list, tuple)):
        items = [_encode(v, f"{where}[{i}]", depth, path) for i, v in enumerate(value)]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        return items if isinstance(value, list) else {TAG: "tuple", "v": items}
    base = _pydantic_base()
    if base is not None and isinstance(value, base):
        model: Any = value
        path_name = _type_path(cast(type[Any], type(model)), where)
        try:
            dumped = model.model_dump(mode="json")
        except Exception as exc:
            raise SerializationError(f"{where}: cannot dump {path_name}: {exc}") from exc
        return {TAG: "pydantic", "t": path_name, "v": _encode(dumped, where, depth, path)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: _encode(getattr(value, f.name), f"{where}.{f.name}", depth, path)
            for f in dataclasses.fields(value)
        }
        return {TAG: "dataclass", "t": _type_path(type(value), where), "v": fields}
    raise SerializationError(
        f"{where}: cannot store a {type(value).__module__}.{type(value).__qualname__}; "
        "return JSON-compatible data, a dataclass or a pydantic model"
    )


def _resolve(path: str, where: str) -> type:
    return type_registry.lookup(path, where)


def from_jsonable(data: Any, where: str = "value") -> Any:
    """Rebuild a value written by ``to_jsonable``."""
    if isinstance(data, list):
        return [from_jsonable(v, where) for v in cast(list[Any], data)]
    if not isinstance(data, dict):
        return data
    obj = cast(dict[str, Any], data)
    tag = obj.get(TAG)
    if tag is None:
        return {k: from_jsonable(v, where) for k, v in obj.items()}
    v: Any = obj.get("v")
    try:
        return _decode_tagged(str(tag), v, obj, where)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"{where}: cannot decode a stored {tag!r} value: {exc}") from exc


def _decode_tagged(tag: str, v: Any, obj: dict[str, Any], where: str) -> Any:
    if tag == "dict":
        return {k: from_jsonable(x, where) for k, x in cast(dict[str, Any], v).items()}
    if tag == "tuple":
        return tuple(from_jsonable(x, where) for x in cast(list[Any], v))
    if tag == "bytes":
        return base64.b64decode(cast(str, v), validate=True)
    if tag == "datetime":
        return dt.datetime.fromisoformat(cast(str, v))
    if tag == "float":
        return float(cast(str, v))
    if tag == encryption.SEALED:
        if _keep_sealed.get():
            try:
                plain = _unseal(obj, where)
            except SerializationError:
                return obj  # the layer above raises where the value is needed
            return from_jsonable(loads(plain), where)
        return from_jsonable(loads(_unseal(obj, where)), where)
    if tag == "pydantic":
        path = _stored_path(obj, where)
        tp = _resolve(path, where)
        base = _pydantic_base()
        if base is None or not issubclass(tp, base):
            raise SerializationError(f"{where}: {path!r} is not a pydantic model")
        return cast(Any, tp).model_validate(from_jsonable(v, where))
    if tag == "dataclass":
        path = _stored_path(obj, where)
        tp = _resolve(path, where)
        if not dataclasses.is_dataclass(tp):
            raise SerializationError(f"{where}: {path!r} is not a dataclass")
        if not isinstance(v, dict):
            raise SerializationError(f"{where}: stored {path!r} fields are not an object")
        fields = {f.name: f for f in dataclasses.fields(tp)}
        undeclared = sorted(set(cast(dict[str, Any], v)) - set(fields))
        if undeclared:
            raise SerializationError(
                f"{where}: stored {path!r} has fields {undeclared} its class does not declare"
            )
        values = {k: from_jsonable(x, where) for k, x in cast(dict[str, Any], v).items()}
        built = tp(**{k: x for k, x in values.items() if fields[k].init})
        for k, x in values.items():
            if not fields[k].init:  # declared with init=False: set as the class would
                object.__setattr__(built, k, x)
        return built
    raise SerializationError(f"{where}: unknown stored value tag {tag!r}")


_keep_sealed: contextvars.ContextVar[bool] = contextvars.ContextVar("keep_sealed", default=False)


def from_stored_layer(data: Any, where: str = "value") -> Any:
    """``from_jsonable`` for a substrate's own storage layer (DBOS's serializer), under
    which perdure decodes again: without a key, sealed values are passed up unopened, so
    the layer above shows them as encrypted or raises where the value is needed.
    Without a key (or without the one that sealed them), sealed values pass unopened."""
    token = _keep_sealed.set(True)
    try:
        return from_jsonable(data, where)
    finally:
        _keep_sealed.reset(token)


def _unseal(obj: dict[str, Any], where: str) -> bytes:
    ring = encryption.keyring()
    if ring is None:
        raise SerializationError(
            f"{where}: stored encrypted (key {obj.get('k')!r}) and no key is configured; "
            f"set {encryption.KEY_ENV} or {encryption.KEY_FILE_ENV}"
        )
    return ring.unseal(obj, where)


def reveal(data: Any, where: str = "value") -> Any:
    """``data`` (stored JSON) with every sealed envelope opened, for showing; without
    the key an envelope stays, shown as encrypted with its key id."""
    if isinstance(data, list):
        return [reveal(v, where) for v in cast(list[Any], data)]
    if not isinstance(data, dict):
        return data
    obj = cast(dict[str, Any], data)
    if obj.get(TAG) == encryption.SEALED:
        ring = encryption.keyring()
        if ring is None:
            return {TAG: encryption.SEALED, "k": obj.get("k"), "encrypted": True}
        try:
            return reveal(loads(ring.unseal(obj, where)), where)
        except SerializationError as exc:
            return {TAG: encryption.SEALED, "k": obj.get("k"), "undecryptable": str(exc)}
    return {k: reveal(v, where) for k, v in obj.items()}


def _stored_path(obj: dict[str, Any], where: str) -> str:
    path = obj.get("t")
    if not isinstance(path, str):
        raise SerializationError(f"{where}: stored type name {path!r} is not a string")
    return path


def dumps(data: Any) -> str:
    """JSON text of already-jsonable data (compact, UTF-8 kept)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads(text: str | bytes) -> Any:
    return json.loads(text)
