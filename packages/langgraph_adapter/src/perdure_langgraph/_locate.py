"""``"module:attribute"`` locators: how a worker re-creates the graph of a thread after a crash."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from perdure import ConfigurationError


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


def resolve(ref: str) -> Any:
    """The object a ``"module:attribute"`` locator names."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"graph locator {ref!r} is not of the form 'module:attribute'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import module {module_name!r} of graph {ref!r}: {exc}; run the worker "
            "where that module is importable (perdure worker MODULE)"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attr!r} (graph {ref!r})"
            ) from None
    return obj


def locate(*candidates: Any) -> str | None:
    """A locator under which one of ``candidates`` is a module-level attribute, or None."""
    wanted = {id(c) for c in candidates}
    found: list[tuple[bool, bool, int, str, str]] = []
    main = sys.modules.get("__main__")
    for name, module in list(sys.modules.items()):
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
        return f"{name}:{attr}"
    return None
