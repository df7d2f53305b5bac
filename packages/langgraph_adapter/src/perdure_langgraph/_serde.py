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

A checkpoint names a class by ``module.name``. The classes this process wrote or was
given are rebuilt as those very classes, found by that name in memory, never imported;
this is how a class defined inside a function (a graph factory, a test) round-trips in
the process that defines it, as it does through ``SqliteSaver`` (which then hands back a
plain dict). Another process reads such a class only once it has written one or been
given it in ``allowed_types`` — until then, as for any stored class that is not allowed,
reading is a :class:`DisallowedTypeError` naming it, never a plain dict in its place.

A value LangGraph's msgpack itself cannot encode (a class that is not a data class, a
subclass of ``float`` or of ``tuple`` other than a NamedTuple) is a
:class:`DisallowedTypeError` when it is written. Subclasses of ``str``, ``int``,
``list`` and ``dict`` (``langchain_core``'s ``TextAccessor``, for one) are stored as the
plain type and read back as it, as from every LangGraph saver.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import jsonplus as J
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from perdure.spi import ConfigurationError, SerializationError
from perdure_langgraph._compat import (
    SAFE_METHODS,
    SAFE_TYPES,
    DeltaSnapshot,
    declared_types,
    numpy_ext_hook,
    schema_types,
)

_OPT = ormsgpack.OPT_NON_STR_KEYS
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, bytearray})
_CONTAINERS = (list, tuple, set, frozenset, deque)

#: Serializer types other than msgpack that hold their value as is.
_READ_AS_IS = frozenset({"null", "bytes", "bytearray"})

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
            builder: Any = item  # a compiled graph, or a StateGraph to compile
            graph = builder if hasattr(builder, "channels") else builder.compile()
            keys |= schema_types(graph)
        else:
            raise ConfigurationError(
                f"allowed_types takes classes, (module, name) pairs or graphs, not {item!r}"
            )
    return keys


def _rebuildable(tp: type) -> bool:
    """Whether ``module.name`` finds this very class (what another process would look up)."""
    module = sys.modules.get(tp.__module__)
    return module is not None and getattr(module, tp.__name__, None) is tp


def _natively_packed(value: Any) -> type | None:
    """The plain type ormsgpack writes a subclass of ``str``, ``int``, ``list`` or ``dict``
    as (it never calls LangGraph's encoder for them), or ``None``. Such a value comes back
    as that plain type, from every LangGraph saver, so there is no class to allow."""
    for base in (str, int, dict, list):
        if isinstance(value, base):
            return base
    return None


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
        self.allowed: set[TypeKey] = set()
        #: Classes this process wrote or was given: shared with clones made by
        #: ``with_allowlist``; decoding looks these up before any import.
        self.learned: dict[TypeKey, type] = {}
        #: Refuse, when written, a class another process could not find by its name
        #: (``durable()`` sets it: any worker must be able to read a durable thread).
        self.portable = False
        self.allow(allowed_types or ())

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[Any]) -> PerdureSerializer:
        """A serializer that also allows ``extra_allowlist`` (LangGraph's ``with_allowlist``)."""
        extra = type_keys(extra_allowlist) - self.allowed
        if not extra:
            return self
        clone = PerdureSerializer()
        clone.allowed = self.allowed | extra
        clone.learned = self.learned
        clone.portable = self.portable
        return clone

    def allow(self, allowed_types: AllowedTypes) -> None:
        """Allow more types on this serializer (in place)."""
        items = list(allowed_types)
        self.allowed |= type_keys(items)
        for item in items:
            if isinstance(item, type):
                self.learn(item)

    def learn(self, tp: type) -> None:
        """Rebuild ``tp`` itself for its ``(module, name)`` from now on in this process.

        Checkpoints name a class by ``module.name`` only. A class defined inside a function
        (a graph factory, a test) is not found there, so the process that defines it must
        tell which class that name is: writing one, or passing it in ``allowed_types``,
        does. A new definition of the same function's class (the factory called again)
        replaces the old one; two different classes sharing one name would make the name
        ambiguous, so the second is refused.
        """
        key = (tp.__module__, tp.__name__)
        known = self.learned.get(key)
        if known is not None and known is not tp and known.__qualname__ != tp.__qualname__:
            raise DisallowedTypeError(
                f"a {tp.__module__}.{tp.__qualname__} cannot be checkpointed: checkpoints name "
                f"a class by module and name, and this process already checkpoints "
                f"{known.__module__}.{known.__qualname__} as {tp.__module__}.{tp.__name__}; "
                "rename one of them or define it at module level"
            )
        self.learned[key] = tp

    # -- writing ------------------------------------------------------------------------

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if not isinstance(obj, bytes | bytearray):  # stored as they are, even subclasses
            self.check(obj)
        return super().dumps_typed(obj)

    def check(self, value: Any, depth: int = 0) -> None:
        """Raise :class:`DisallowedTypeError` if ``value`` holds a class that could not be
        rebuilt when read; remember the classes it holds as allowed in this process."""
        tp = type(value)
        if tp in _PLAIN or depth > 200:
            return
        if tp in _CONTAINERS:
            for item in value:
                self.check(item, depth + 1)
            return
        if tp is dict:
            self._check_items(value, depth)
            return
        if not isinstance(value, enum.Enum):  # an Enum is a data class, even a str Enum
            native = _natively_packed(value)
            if native is dict:
                self._check_items(value, depth)
                return
            if native is list:
                for item in value:
                    self.check(item, depth + 1)
                return
            if native is not None:
                return
            if isinstance(value, float | tuple) and not _data_class(value):
                raise DisallowedTypeError(
                    f"a {tp.__module__}.{tp.__qualname__} cannot be checkpointed: LangGraph's "
                    f"msgpack encodes no subclass of float or tuple (other than a NamedTuple); "
                    f"store it as a plain {'float' if isinstance(value, float) else 'tuple'}"
                )
        key = (tp.__module__, tp.__name__)
        if key in SAFE_TYPES or isinstance(value, BaseException):
            return
        if DeltaSnapshot is not None and isinstance(value, DeltaSnapshot):
            self.check(value.value, depth + 1)
            return
        if self.learned.get(key) is not tp:
            if (
                key not in self.allowed
                and not _data_class(value)
                and not isinstance(value, _CONTAINERS)
            ):
                raise DisallowedTypeError(
                    f"a {tp.__module__}.{tp.__qualname__} cannot be checkpointed: "
                    "LangGraph stores only data classes (pydantic models, dataclasses, "
                    "Enums, NamedTuples) and its own safe types"
                )
            if self.portable and not _rebuildable(tp):
                raise DisallowedTypeError(
                    f"a {tp.__module__}.{tp.__qualname__} cannot be checkpointed by a durable "
                    "graph: it is not reachable as module.name, so a worker in another process "
                    "could not rebuild it after a crash (define it at module level)"
                )
            self.learn(tp)
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                self.check(getattr(value, f.name), depth + 1)
        elif callable(dump := getattr(value, "model_dump", None)):
            self.check(dump(), depth + 1)
        elif isinstance(value, _CONTAINERS):  # a NamedTuple, or a set or deque subclass
            for item in value:
                self.check(item, depth + 1)

    def _check_items(self, value: dict[Any, Any], depth: int) -> None:
        for k, v in value.items():
            self.check(k, depth + 1)
            self.check(v, depth + 1)

    # -- reading ------------------------------------------------------------------------

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, payload = data
        if type_ != "msgpack":
            if type_ in _READ_AS_IS:
                return super().loads_typed(data)
            # LangGraph's "json" revives classes named in the data (it imports them) and
            # "pickle" runs code: this serializer writes neither, so it reads neither.
            raise SerializationError(
                f"stored with serializer type {type_!r}, which this checkpointer does not "
                f"read (it writes msgpack, null, bytes and bytearray only)"
            )
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
            found = getattr(sys.modules.get(module) or _import(module), name, None)
            if callable(found):  # a class, or LangGraph's safe re.compile
                return found
            raise DisallowedTypeError(
                f"the checkpoint holds a {module}.{name}, which is allowed but is not a class "
                f"found at {module}.{name}: a class defined inside a function is rebuilt only "
                "by a process that wrote one or passed it in allowed_types=[...] (or define "
                "it at module level)"
            )
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


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def strict_serializer(allowed_types: AllowedTypes | None = None) -> PerdureSerializer:
    """The checkpointer's serializer: no pickle, only allowed types decoded."""
    return PerdureSerializer(allowed_types)


def default_serializer(allowed_types: AllowedTypes | None = None) -> PerdureSerializer:
    """The saver's serializer (encryption at rest is the saver's: ``_sealing``)."""
    return strict_serializer(allowed_types)


def inner_serializer(serde: SerializerProtocol) -> PerdureSerializer | None:
    """The ``PerdureSerializer`` inside ``serde`` (itself, or under LangGraph's
    ``EncryptedSerializer`` when a caller passed one as ``serde=``)."""
    if isinstance(serde, PerdureSerializer):
        return serde
    inner = getattr(serde, "serde", None)
    return inner if isinstance(inner, PerdureSerializer) else None
