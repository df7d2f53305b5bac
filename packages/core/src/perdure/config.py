"""Which backend URL applies: argument, else ``PERDURE_URL``, else the nearest
``pyproject.toml``'s ``[tool.perdure] url``, else ``sqlite:///perdure.db``."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from perdure.errors import ConfigurationError

DEFAULT_URL = "sqlite:///perdure.db"


def _from_pyproject(start: Path) -> str | None:
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigurationError(f"{path}: cannot read [tool.perdure]: {exc}") from exc
            url = data.get("tool", {}).get("perdure", {}).get("url")
            if url is None:
                continue
            if not isinstance(url, str) or not url:
                raise ConfigurationError(f"{path}: [tool.perdure] url must be a non-empty string")
            return url
    return None


def resolve_url(url: str | None = None, *, cwd: Path | None = None) -> str:
    """The backend URL in force."""
    if url:
        return url
    env = os.environ.get("PERDURE_URL")
    if env:
        return env
    return _from_pyproject(cwd or Path.cwd()) or DEFAULT_URL
