"""Import locators (``"module:attribute"``) for objects a worker must re-create.

A run's input names its agent, graph or config by where it is defined, so a worker that
imports that module after a crash finds the very same object. Adapters share this.

A locator read from stored data never makes perdure import anything: ``resolve`` looks
only in modules the user chose — those a worker was told to import (``perdure worker
MODULE``), modules of objects this process located itself (``find``), modules allowed
with ``allow_module`` or configured like the URL (``PERDURE_LOCATORS``, ``[tool.perdure]
locators``: module names, comma-separated or a list) — and in their submodules. A
locator the caller gives in code (``given=True``) is the caller's own choice and is
imported.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from perdure._config import setting
from perdure._errors import ConfigurationError

__all__ = ["allow_module", "find", "importable_name", "locate", "resolve"]

_cache: dict[int, tuple[Any, str]] = {}
_allowed: set[str] = set()


def allow_module(name: str) -> None:
    """Let stored locators name objects of module ``name`` (and its submodules)."""
    _allowed.add(name)


def _configured() -> set[str]:
    raw: Any = setting("locators", "PERDURE_LOCATORS")
    items: list[Any] = []
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list):
        items = cast(list[Any], raw)
    return {str(i).strip() for i in items if str(i).strip()}


def _is_allowed(module_name: str) -> bool:
    allowed = _allowed | _configured()
    main = sys.modules.get("__main__")
    main_name = None if main is None else _main_module_name(main)
    if main_name:
        allowed.add(main_name)
    return any(module_name == a or module_name.startswith(a + ".") for a in allowed)


def importable_name(module_name: str) -> str:
    """``module_name``, or for ``__main__`` the name a worker would import it by."""
    if module_name != "__main__":
        return module_name
    main = sys.modules.get("__main__")
    return (None if main is None else _main_module_name(main)) or module_name


def _main_module_name(module: ModuleType) -> str | None:
    """The name a worker imports a ``__main__`` module by (``python -m x`` or a script)."""
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def resolve(ref: str, *, what: str = "object", given: bool = False) -> Any:
    """The object a ``"module:attribute"`` locator names, or ``ConfigurationError``.

    A stored locator (the default) may name only a module the user chose (see the
    module's docstring); nothing else is imported. ``given=True``: the caller's code
    passed ``ref`` itself, so its module is imported and allowed from then on."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{what} locator {ref!r} is not of the form 'module:attribute'")
    if given:
        allow_module(module_name)
    elif not _is_allowed(module_name):
        raise ConfigurationError(
            f"{what} locator {ref!r} names module {module_name!r}, which this process was "
            "not told to import; stored data never chooses what a worker imports: run "
            f"`perdure worker {module_name}` or allow it (PERDURE_LOCATORS, [tool.perdure] "
            "locators, perdure._locate.allow_module)"
        )
    if any(part.startswith("_") for part in attr.split(".")):
        raise ConfigurationError(f"{what} locator {ref!r} names a private attribute")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import module {module_name!r} of {what} {ref!r}: {exc}; "
            "run the worker where that module is importable (perdure worker MODULE)"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attr!r} ({what} {ref!r})"
            ) from None
    return obj


def find(*candidates: Any) -> str | None:
    """A locator under which one of ``candidates`` is a module-level attribute of an
    imported module (public modules and short names first), or None."""
    if len(candidates) == 1:
        hit = _cache.get(id(candidates[0]))
        if hit is not None and hit[0] is candidates[0]:
            return hit[1]
    wanted = {id(c) for c in candidates}
    found: list[tuple[bool, bool, int, str, str]] = []
    main = sys.modules.get("__main__")
    # sys.modules may hold None (a blocked import) despite its annotation.
    for name, module in list(cast(dict[str, ModuleType | None], sys.modules).items()):
        if module is None:
            continue
        try:
            members = vars(module)
        except TypeError:
            continue
        for attr, value in list(members.items()):
            if id(value) in wanted and not attr.startswith("__"):
                found.append((module is main, name.startswith("_"), len(name), name, attr))
    found.sort()
    for is_main, _, _, name, attr in found:
        if is_main:
            main_name = None if main is None else _main_module_name(main)
            if main_name is None:
                continue
            name = main_name
        ref = f"{name}:{attr}"
        allow_module(name)  # this process holds the object: its locator reads back here
        if len(candidates) == 1:
            _cache[id(candidates[0])] = (candidates[0], ref)
        return ref
    return None


def locate(obj: Any, *, what: str, hint: str) -> str:
    """``find(obj)``, or a ``ConfigurationError`` saying how to fix it."""
    ref = find(obj)
    if ref is None:
        raise ConfigurationError(
            f"cannot find {what} {getattr(obj, 'name', obj)!r} as a module-level attribute of "
            "any imported module, so a worker could not re-create it after a crash; define it "
            f"at module level, or pass {hint}='module:attribute'"
        )
    return ref
