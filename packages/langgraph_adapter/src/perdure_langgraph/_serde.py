"""The checkpointer's serializer: LangGraph's msgpack encoding, decoding only allowed types.

``PerdureSerializer`` writes exactly what ``JsonPlusSerializer`` writes, so a checkpoint
round-trips every type LangGraph's own savers round-trip, but it never uses pickle and
never imports a type because stored data names it. A class is rebuilt only when it is

* one of LangGraph's safe types (messages, ``Send``, ``Command``, ``Interrupt``,
  datetime, UUID, Decimal, sets, paths, ...);
* declared by the graph's schemas (``durable()`` adds them; so does LangGraph's own
  ``compile()`` under ``LANGGRAPH_STRICT_MSGPACK=true`` through ``with_allowlist``);
* listed in ``allowed_types`` (``PerdureSaver.from_url(url, allowed_types=[...])``:
  classes, ``(module, name)`` pairs, or graphs whose schema types to allow); or
* written by this serializer in this process (the graph's own code produced it).

A value the serializer could never rebuild (a class defined inside a function, or not
reachable as ``module.name``) is a :class:`DisallowedTypeError` when it is written; a
stored class that is not allowed is a :class:`DisallowedTypeError` when it is read —
never a plain dict in its place.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import importlib
import importlib.util
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import jsonplus as J
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from perdure.errors import ConfigurationError, SerializationError
from perdure_langgraph._compat import (
    SAFE_METHODS,
    SAFE_TYPES,
    DeltaSnapshot,
    declared_types,
    numpy_ext_hook,
    schema_types,
)

#: Environment variable holding the AES key (16, 24 or 32 bytes: raw, hex or base64).
KEY_ENV = "PERDURE_LANGGRAPH_KEY"

_AES_SIZES = (16, 24, 32)
_OPT = ormsgpack.OPT_NON_STR_KEYS
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, bytearray})
_CONTAINERS = (list, tuple, set, frozenset, deque)

TypeKey = tuple[str, ...]
#: The first refusal of the value being decoded on this thread (ormsgpack hides it).
_refused = threading.local()
AllowedTypes = Iterable[Any]


class DisallowedTypeError(SerializationError):
    """A value of a class the checkpointer may not rebuild (named in the message)."""


def type_keys(allowed: AllowedTypes | None) -> set[TypeKey]:
    """``(module, name)`` keys for classes, ``(module, name)`` pairs and graphs."""
    keys: set[TypeKey] = set()
    for item in allowed or ():
        if isinstance(item, tuple) and all(isinstance(p, str) for p in item):  # pyright: ignore[reportUnknownVariableType]
            keys.add(tuple(item))  # pyright: ignore[reportUnknownArgumentType]
        elif isinstance(item, type):
            keys.add((item.__module__, item.__name__))
            keys |= declared_types(item)
        elif hasattr(item, "channels") or hasattr(item, "compile"):
            graph = item.compile() if not hasattr(item, "channels") else item
            keys |= schema_types(graph)
        else:
            raise ConfigurationError(
                f"allowed_types takes classes, (module, name) pairs or graphs, not {item!r}"
            )
    return keys


def _rebuildable(tp: type) -> bool:
    """Whether ``module.name`` finds this very class again (what decoding looks up)."""
    module = sys.modules.get(tp.__module__)
    return module is not None and getattr(module, tp.__name__, None) is tp


def _data_class(value: Any) -> bool:
    """Kinds LangGraph encodes as data and rebuilds by calling the class on that data."""
    return (
        (hasattr(value, "model_dump") and callable(value.model_dump))
        or dataclasses.is_dataclass(value)
        or isinstance(value, enum.Enum)
        or (hasattr(value, "_asdict") and callable(value._asdict))
        or (hasattr(value, "dict") and callable(value.dict))
    )


class PerdureSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` without pickle, decoding only allowed types (module doc)."""

    def __init__(self, allowed_types: AllowedTypes | None = None) -> None:
        super().__init__(pickle_fallback=False, allowed_msgpack_modules=None)
        self.allowed: set[TypeKey] = type_keys(allowed_types)
        #: Classes this process wrote: shared with clones made by ``with_allowlist``.
        self.learned: dict[TypeKey, type] = {}

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[Any]) -> PerdureSerializer:
        """A serializer that also allows ``extra_allowlist`` (LangGraph's ``with_allowlist``)."""
        extra = type_keys(extra_allowlist) - self.allowed
        if not extra:
            return self
        clone = PerdureSerializer()
        clone.allowed = self.allowed | extra
        clone.learned = self.learned
        return clone

    def allow(self, allowed_types: AllowedTypes) -> None:
        """Allow more types on this serializer (in place)."""
        self.allowed |= type_keys(allowed_types)

    # -- writing ------------------------------------------------------------------------

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.check(obj)
        return super().dumps_typed(obj)

    def check(self, value: Any, depth: int = 0) -> None:
        """Raise :class:`DisallowedTypeError` if ``value`` holds a class that could not be
        rebuilt when read; remember the classes it holds as allowed in this process."""
        tp = type(value)
        if tp in _PLAIN or depth > 200:
            return
        if isinstance(value, _CONTAINERS):
            for item in value:  # pyright: ignore[reportUnknownVariableType]
                self.check(item, depth + 1)
            return
        if tp is dict:
            for k, v in value.items():
                self.check(k, depth + 1)
                self.check(v, depth + 1)
            return
        key = (tp.__module__, tp.__name__)
        if key in SAFE_TYPES or isinstance(value, BaseException):
            return
        if DeltaSnapshot is not None and isinstance(value, DeltaSnapshot):
            self.check(value.value, depth + 1)
            return
        if key not in self.allowed and key not in self.learned:
            if not _data_class(value) or not _rebuildable(tp):
                raise DisallowedTypeError(
                    f"a {tp.__module__}.{tp.__qualname__} cannot be checkpointed: "
                    + (
                        "it is not reachable as module.name (define it at module level)"
                        if _data_class(value)
                        else "LangGraph stores only data classes (pydantic models, "
                        "dataclasses, Enums, NamedTuples) and its own safe types"
                    )
                )
            self.learned[key] = tp
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                self.check(getattr(value, f.name), depth + 1)
        elif hasattr(value, "model_dump") and callable(value.model_dump):
            self.check(value.model_dump(), depth + 1)

    # -- reading ------------------------------------------------------------------------

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, payload = data
        if type_ != "msgpack":
            return super().loads_typed(data)
        _refused.error = None
        try:
            return self._unpack(payload)
        except ValueError:
            # ormsgpack reports any error of the ext hook as "ext_hook failed"
            refused: DisallowedTypeError | None = getattr(_refused, "error", None)
            if refused is None:
                raise
            _refused.error = None
            raise refused from None

    def _class(self, module: str, name: str) -> Any:
        key = (module, name)
        learned = self.learned.get(key)
        if learned is not None:
            return learned
        if key in SAFE_TYPES or key in self.allowed:
            return getattr(importlib.import_module(module), name)
        raise DisallowedTypeError(
            f"the checkpoint holds a {module}.{name}, which this checkpointer is not allowed "
            f"to rebuild: declare it in the graph's state schema, or pass "
            f"allowed_types=[{name}] (or [({module!r}, {name!r})]) to PerdureSaver"
        )

    def _unpack(self, data: bytes) -> Any:
        return ormsgpack.unpackb(data, ext_hook=self._ext_hook, option=_OPT)

    def _ext_hook(self, code: int, data: bytes) -> Any:
        try:
            return self._rebuild(code, data)
        except DisallowedTypeError as exc:
            if getattr(_refused, "error", None) is None:
                _refused.error = exc
            raise

    def _rebuild(self, code: int, data: bytes) -> Any:
        if code == J.EXT_DELTA_SNAPSHOT and DeltaSnapshot is not None:
            return DeltaSnapshot(self._unpack(data))
        if code == J.EXT_NUMPY_ARRAY:
            return numpy_ext_hook(code, data)
        tup = self._unpack(data)
        module, name = tup[0], tup[1]
        if code == J.EXT_METHOD_SINGLE_ARG:
            if (module, name, tup[3]) not in SAFE_METHODS:
                raise DisallowedTypeError(
                    f"the checkpoint calls {module}.{name}.{tup[3]}, which is not allowed"
                )
            return getattr(self._class(module, name), tup[3])(tup[2])
        cls = self._class(module, name)
        if code == J.EXT_CONSTRUCTOR_SINGLE_ARG:
            return cls(tup[2])
        if code == J.EXT_CONSTRUCTOR_POS_ARGS:
            if (module, name) == ("langgraph.types", "Send"):
                return cls(*tup[2][:2], **({"timeout": tup[2][2]} if len(tup[2]) > 2 else {}))
            return cls(*tup[2])
        if code == J.EXT_CONSTRUCTOR_KW_ARGS:
            return cls(**tup[2])
        if code in (J.EXT_PYDANTIC_V1, J.EXT_PYDANTIC_V2):
            try:
                return cls(**tup[2])
            except Exception:
                construct: Callable[..., Any] = getattr(
                    cls, "model_construct", getattr(cls, "construct", cls)
                )
                return construct(**tup[2])
        raise DisallowedTypeError(f"unknown msgpack extension {code} for {module}.{name}")


def strict_serializer(allowed_types: AllowedTypes | None = None) -> PerdureSerializer:
    """The checkpointer's serializer: no pickle, only allowed types decoded."""
    return PerdureSerializer(allowed_types)


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


def default_serializer(
    key: str | None = None, allowed_types: AllowedTypes | None = None
) -> SerializerProtocol:
    """The strict serializer, wrapped in AES encryption when a key is given or in the env."""
    raw = key if key is not None else os.environ.get(KEY_ENV)
    if not raw:
        return strict_serializer(allowed_types)
    aes_key = parse_key(raw)
    if importlib.util.find_spec("Crypto") is None:
        raise ConfigurationError(
            f"{KEY_ENV} is set, so checkpoints must be encrypted, but pycryptodome is not "
            "installed: install it (pip install pycryptodome) or unset the variable"
        )
    return EncryptedSerializer.from_pycryptodome_aes(strict_serializer(allowed_types), key=aes_key)


def inner_serializer(serde: SerializerProtocol) -> PerdureSerializer | None:
    """The ``PerdureSerializer`` inside ``serde`` (itself, or under encryption)."""
    if isinstance(serde, PerdureSerializer):
        return serde
    inner = getattr(serde, "serde", None)
    return inner if isinstance(inner, PerdureSerializer) else None
