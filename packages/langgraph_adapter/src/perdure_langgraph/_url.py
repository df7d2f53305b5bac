"""Parse a perdure store URL into what the checkpointer needs to open its own connection."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from perdure.spi import ConfigurationError, mask_url

SYNCHRONOUS_LEVELS = ("off", "normal", "full", "extra")
_SYNC_ALIASES = {"0": "off", "1": "normal", "2": "full", "3": "extra"}
_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True)
class SqliteTarget:
    """A SQLite file (or ``:memory:``) and its durability settings."""

    path: str
    synchronous: str = "normal"
    busy_timeout_ms: int = 5000


@dataclass(frozen=True)
class PostgresTarget:
    """A PostgreSQL server: libpq conninfo (without our own parameters) and a schema."""

    conninfo: str
    schema: str = "perdure"
    display: str = ""
    pool_max_size: int = 10
    connect_timeout_s: float = 10.0


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``: core's one masking function."""
    return mask_url(url)


def parse_url(url: str) -> SqliteTarget | PostgresTarget:
    """Parse ``sqlite:///path.db[?synchronous=full]`` or ``postgresql://...[?schema=x]``.

    A DBOS URL (``dbos+sqlite:///...``, ``dbos+postgresql://...[?schema=x]``) names the
    database of DBOS's system tables: the checkpoints live there too.
    """
    if "://" in url:
        from perdure.spi import state_url

        # The backend's SQL database: this URL, DBOS's own, or what e.g. Temporal names.
        url = state_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigurationError(f"malformed store URL {redact(url)!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return _parse_sqlite(url, parts.netloc, parts.path, parts.query)
    if scheme in ("postgresql", "postgres"):
        return _parse_postgres(url, parts.query)
    raise ConfigurationError(
        f"PerdureSaver cannot use store URL {redact(url)!r}: the scheme {parts.scheme!r} is "
        "not supported (use sqlite:///path.db or postgresql://user@host/db)"
    )


def _parse_sqlite(url: str, netloc: str, path: str, query: str) -> SqliteTarget:
    if netloc:
        raise ConfigurationError(
            f"malformed SQLite URL {url!r}: expected sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db (three or four slashes, no host)"
        )
    file_path = path[1:] if path.startswith("/") else path
    if not file_path:
        raise ConfigurationError(f"SQLite URL {url!r} names no database file")
    synchronous = "normal"
    busy_timeout = 5000
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "synchronous":
            level = _SYNC_ALIASES.get(value, value.lower())
            if level not in SYNCHRONOUS_LEVELS:
                raise ConfigurationError(
                    f"SQLite URL {url!r}: synchronous={value!r} is not one of "
                    f"{', '.join(SYNCHRONOUS_LEVELS)}"
                )
            synchronous = level
        elif key == "busy_timeout":
            try:
                busy_timeout = int(value)
            except ValueError:
                raise ConfigurationError(
                    f"SQLite URL {url!r}: busy_timeout={value!r} is not an integer (ms)"
                ) from None
        else:
            raise ConfigurationError(
                f"SQLite URL {url!r}: unknown parameter {key!r} (known: synchronous, busy_timeout)"
            )
    return SqliteTarget(path=file_path, synchronous=synchronous, busy_timeout_ms=busy_timeout)


def _parse_postgres(url: str, query: str) -> PostgresTarget:
    schema = "perdure"
    pool_max = 10
    timeout = 10.0
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "connect_timeout":  # libpq's own parameter; also bounds the pool's wait
            try:
                timeout = float(value)
            except ValueError:
                raise ConfigurationError(
                    f"PostgreSQL URL {redact(url)!r}: connect_timeout={value!r} is not a number"
                ) from None
            kept.append((key, value))
        elif key == "schema":
            schema = value
        elif key == "pool_max_size":
            try:
                pool_max = int(value)
            except ValueError:
                raise ConfigurationError(
                    f"PostgreSQL URL {redact(url)!r}: pool_max_size={value!r} is not an integer"
                ) from None
        else:
            kept.append((key, value))
    if not _SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"PostgreSQL URL {redact(url)!r}: schema={schema!r} is not a plain identifier "
            "(letters, digits and underscores, not starting with a digit)"
        )
    if pool_max < 1:
        raise ConfigurationError(f"PostgreSQL URL {redact(url)!r}: pool_max_size must be >= 1")
    parts = urlsplit(url)
    conninfo = urlunsplit(parts._replace(query=urlencode(kept)))
    return PostgresTarget(
        conninfo=conninfo,
        schema=schema,
        display=redact(conninfo),
        pool_max_size=pool_max,
        connect_timeout_s=max(timeout, 0.1),
    )
