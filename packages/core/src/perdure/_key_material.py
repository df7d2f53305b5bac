"""Secret keys given as text: decoding them (hex or base64) and finding where they are
configured (an environment variable, else a key file named by a variable or by
``[tool.perdure]``). Shared by encryption at rest (``perdure._encryption``) and the
signed operator tokens (``perdure._tokens``), which differ only in the length a key
must have and what their errors call it."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perdure._config import setting
from perdure._errors import ConfigurationError

__all__ = ["KeySource", "decode_key"]

GENERATE = "python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())'"


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def decode_key(
    raw: str, where: str, *, what: str, fits: Callable[[bytes], bool], size: str
) -> bytes:
    """The key ``raw`` gives as hex or base64, if ``fits`` it; else a
    ``ConfigurationError`` naming ``where`` and the ``size`` wanted, never the text."""
    text = raw.strip()
    for decode in (bytes.fromhex, _b64):
        try:
            key = decode(text)
        except (ValueError, binascii.Error):
            continue
        if fits(key):
            return key
    raise ConfigurationError(
        f"{where}: {what} must be {size} given as base64 or hex (e.g. {GENERATE})"
    )


@dataclass(frozen=True)
class KeySource:
    """Where a kind of key is configured: ``env`` holds it, else the file named by
    ``file_env`` or ``[tool.perdure] <file_setting>`` does."""

    env: str
    file_env: str
    file_setting: str
    what: str

    def text(self) -> tuple[str, str] | None:
        """The configured key text and where it came from, or None when none is."""
        raw = os.environ.get(self.env)
        if raw:
            return raw, self.env
        path = setting(self.file_setting, self.file_env)
        if path is None or path == "":
            return None
        if not isinstance(path, str):
            raise ConfigurationError(f"[tool.perdure] {self.file_setting} must be a path")
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the {self.what} file {path!r}: {exc.strerror}"
            ) from exc
        return text, f"the {self.what} file {path!r}"
