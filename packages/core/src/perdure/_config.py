"""Settings, each read from the argument, else an environment variable, else the nearest
``pyproject.toml``'s ``[tool.perdure]`` table. The backend URL falls back to
``sqlite:///perdure.db``."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from perdure._errors import ConfigurationError

DEFAULT_URL = "sqlite:///perdure.db"


def _from_pyproject(start: Path, key: str) -> tuple[Path, Any] | None:
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigurationError(f"{path}: cannot read [tool.perdure]: {exc}") from exc
            value = data.get("tool", {}).get("perdure", {}).get(key)
            if value is None:
                continue
            return path, value
    return None


def setting(key: str, env: str, *, cwd: Path | None = None) -> Any:
    """``$env`` if set and non-empty, else ``[tool.perdure] key``, else None."""
    value = os.environ.get(env)
    if value:
        return value
    found = _from_pyproject(cwd or Path.cwd(), key)
    return None if found is None else found[1]


def resolve_url(url: str | None = None, *, cwd: Path | None = None) -> str:
    """The backend URL in force."""
    if url:
        return url
    env = os.environ.get("PERDURE_URL")
    if env:
        return env
    found = _from_pyproject(cwd or Path.cwd(), "url")
    if found is None:
        return DEFAULT_URL
    path, value = found
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{path}: [tool.perdure] url must be a non-empty string")
    return value
