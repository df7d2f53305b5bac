"""The types stored data may rebuild: an explicit registry, never an import.

A stored dataclass or pydantic model names its type as ``module:qualname``. Decoding
looks that name up here and nowhere else, so a hostile row can neither import a module
nor build a class the program did not declare. Types enter the registry from code:

* ``register_type(T)`` — what an application or adapter calls for the types it stores;
* declarations perdure reads itself: a ``@perdure.workflow``'s or step's parameter and
  return annotations, a LangGraph state schema, an agent's ``output_type``;
* values this process encodes (its own code produced them);
* the allow-list: ``allow_types(...)``, else ``PERDURE_TYPES`` (comma-separated), else
  ``[tool.perdure] types = [...]`` in the nearest ``pyproject.toml``. Entries are
  ``module:qualname`` or ``module:*``; only modules the configuration names are imported.

Registering a type registers the dataclass and pydantic types its fields declare.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, cast

from perdure._config import setting
from perdure._errors import ConfigurationError, SerializationError
from perdure._locate import importable_name

__all__ = ["allow_types", "lookup", "register_annotations", "register_type", "type_path"]

TYPES_ENV = "PERDURE_TYPES"

_lock = threading.RLock()
_types: dict[str, type] = {}
#: Functions whose annotations are read at the first lookup miss: at decoration time
#: the classes they name may not be defined yet (``from __future__ import annotations``).
_pending: list[Callable[..., Any]] = []
_allowed: list[str] | None = None


def _pydantic_base() -> type[Any] | None:
    module = sys.modules.get("pydantic")
    return None if module is None else cast(type[Any], module.BaseModel)


def is_storable_class(tp: object) -> bool:
    """True for a dataclass or pydantic model class (the types stored by name)."""
    if not isinstance(tp, type):
        return False
    if dataclasses.is_dataclass(tp):
        return True
    base = _pydantic_base()
    return base is not None and issubclass(tp, base) and tp is not base


def type_path(tp: type) -> str:
    """``module:qualname`` of ``tp``, with a script's ``__main__`` named as a worker imports it."""
    return f"{importable_name(tp.__module__)}:{tp.__qualname__}"


def register_type(*tps: object) -> None:
    """Let stored values of these dataclasses / pydantic models (and the ones their fields
    declare) be rebuilt. Anything else passed is ignored, so annotations can be fed as is."""
    with _lock:
        for tp in tps:
            _register(tp, set())


def _register(tp: object, seen: set[int]) -> None:
    for found in _classes_in(tp):
        if id(found) in seen:
            continue
        seen.add(id(found))
        if typing.is_typeddict(found):  # a state schema: its fields may hold models
            for hint in _field_hints(found):
                _register(hint, seen)
            continue
        if not is_storable_class(found) or "<locals>" in found.__qualname__:
            continue
        _types.setdefault(type_path(found), found)
        for hint in _field_hints(found):
            _register(hint, seen)


def _classes_in(annotation: object) -> Iterable[type]:
    """Classes an annotation mentions: ``list[A] | None`` → list, A, NoneType."""
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _classes_in(arg)


def _field_hints(tp: type) -> list[object]:
    cls: Any = tp
    try:
        return list(typing.get_type_hints(cls).values())
    except Exception:  # unresolvable forward references: take what is already a class
        if dataclasses.is_dataclass(cls):
            return [f.type for f in dataclasses.fields(cls)]
        fields = getattr(cls, "model_fields", None)  # a pydantic model
        if isinstance(fields, dict):
            return [getattr(f, "annotation", None) for f in cast(dict[str, Any], fields).values()]
        return list(getattr(cls, "__annotations__", {}).values())


def register_annotations(fn: Callable[..., Any]) -> None:
    """Register the storable types named by ``fn``'s parameters and return annotation."""
    with _lock:
        _pending.append(fn)


def _drain_pending() -> None:
    while _pending:
        fn = _pending.pop()
        target = getattr(fn, "__wrapped__", fn)
        try:
            hints: dict[str, Any] = typing.get_type_hints(target)
        except Exception:
            hints = {
                k: v
                for k, v in getattr(target, "__annotations__", {}).items()
                if not isinstance(v, str)
            }
        for hint in hints.values():
            _register(hint, set())


def allow_types(*paths: str) -> None:
    """The allow-list, set in code (overrides ``PERDURE_TYPES`` and ``[tool.perdure] types``)."""
    global _allowed
    with _lock:
        _allowed = [_check_entry(p, "allow_types") for p in paths]


def _check_entry(entry: str, where: str) -> str:
    module, sep, name = entry.strip().partition(":")
    if not sep or not module or not name:
        raise ConfigurationError(f"{where}: {entry!r} is not 'module:qualname' or 'module:*'")
    return f"{module}:{name}"


def _allow_list() -> list[str]:
    global _allowed
    if _allowed is None:
        raw = setting("types", TYPES_ENV)
        entries: list[str]
        if raw is None:
            entries = []
        elif isinstance(raw, str):
            entries = [e for e in raw.split(",") if e.strip()]
        elif isinstance(raw, list) and all(isinstance(e, str) for e in cast(list[Any], raw)):
            entries = cast(list[str], raw)
        else:
            raise ConfigurationError("[tool.perdure] types must be a list of 'module:qualname'")
        _allowed = [_check_entry(e, TYPES_ENV) for e in entries]
    return _allowed


def _from_allow_list(path: str) -> type | None:
    module_name, _, qualname = path.partition(":")
    for entry in _allow_list():
        entry_module, _, entry_name = entry.partition(":")
        if entry_module != module_name or entry_name not in ("*", qualname):
            continue
        # The configuration named this module: importing it is the operator's decision.
        try:
            obj: Any = importlib.import_module(entry_module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise SerializationError(
                f"stored type {path!r} is allow-listed but cannot be found: {exc}"
            ) from exc
        if not is_storable_class(obj):
            raise SerializationError(
                f"stored type {path!r} is allow-listed but is not a dataclass or pydantic model"
            )
        _register(obj, set())
        return cast(type, obj)
    return None


def lookup(path: str, where: str) -> type:
    """The registered type stored as ``path``, or ``SerializationError``; never imports
    a module the stored data names."""
    with _lock:
        found = _types.get(path)
        if found is None and _pending:
            _drain_pending()
            found = _types.get(path)
        if found is None:
            found = _from_allow_list(path)
    if found is None:
        raise SerializationError(
            f"{where}: stored type {path!r} is not registered, so it is not rebuilt; "
            f"register it with perdure.register_type(...) or allow it in {TYPES_ENV} / "
            "[tool.perdure] types"
        )
    return found


def remember(tp: type) -> None:
    """Register a type this process is encoding (its own code produced the value)."""
    path = type_path(tp)
    if path not in _types:
        with _lock:
            _register(tp, set())
