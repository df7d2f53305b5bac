"""The one check of the names a caller gives: run ids, step names, signal names.

Every backend applies it at its entry points (``Backend`` wraps its subclasses' public
methods), so a name is accepted or refused identically on SQLite, PostgreSQL, Temporal
and DBOS, before any substrate sees it: non-empty, at most ``MAX_NAME_LENGTH``
characters, no NUL, valid Unicode (no lone surrogates, which no substrate can store).
"""

from __future__ import annotations

from perdure._errors import InvalidInputError

__all__ = ["MAX_NAME_LENGTH", "check_name"]

#: Temporal allows 1000-byte workflow ids; this leaves room for an id prefix and the
#: UTF-8 expansion of the most common scripts.
MAX_NAME_LENGTH = 255


def check_name(value: object, field: str) -> str:
    """``value`` if it is a usable name, else ``InvalidInputError`` naming ``field``."""
    if not isinstance(value, str):
        raise InvalidInputError(field, value, f"must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidInputError(field, value, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInputError(
            field, value, f"is {len(value)} characters long; at most {MAX_NAME_LENGTH}"
        )
    if "\x00" in value:
        raise InvalidInputError(field, value, "must not contain NUL")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(
                field, value, "is not valid Unicode (it holds a lone surrogate)"
            ) from None
    return value
