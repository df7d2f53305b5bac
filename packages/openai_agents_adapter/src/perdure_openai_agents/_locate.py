"""Import locators (``"module:attribute"``) for objects a worker must re-create.

A run's input names its agent (and run config, hooks) by where it is defined, so a
worker that imports that module after a crash finds the very same object.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from perdure import ConfigurationError

_cache: dict[int, tuple[Any, str]] = {}


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


def resolve(ref: str, *, what: str = "object") -> Any:
    """The object a ``"module:attribute"`` locator names."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{what} locator {ref!r} is not of the form 'module:attribute'")
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


def locate(obj: Any, *, what: str, hint: str) -> str:
    """A locator under which ``obj`` is a module-level attribute of an imported module.

    Raises ``ConfigurationError`` saying how to fix it when there is none.
    """
    hit = _cache.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    found: list[tuple[bool, str, str]] = []
    main = sys.modules.get("__main__")
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        try:
            members = vars(module)
        except TypeError:
            continue
        for attr, value in list(members.items()):
            if value is obj and not attr.startswith("__"):
                found.append((module is main, name, attr))
    found.sort(key=lambda f: (f[0], f[1].startswith("_"), len(f[1]), f[1], f[2]))
    for is_main, name, attr in found:
        if is_main:
            main_name = None if main is None else _main_module_name(main)
            if main_name is None:
                continue
            name = main_name
        ref = f"{name}:{attr}"
        _cache[id(obj)] = (obj, ref)
        return ref
    raise ConfigurationError(
        f"cannot find {what} {getattr(obj, 'name', obj)!r} as a module-level attribute of any "
        f"imported module, so a worker could not re-create it after a crash; define it at "
        f"module level, or pass {hint}='module:attribute'"
    )
