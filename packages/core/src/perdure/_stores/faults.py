"""Which database errors are transient and which permanent, per dialect.

The stores turn every driver error into ``BackendUnavailableError`` (retry later) or
``SubstrateError`` (park and tell an operator) through these two functions, so the
engine above never sees a driver's exception type. See ``perdure._errors``.
"""

from __future__ import annotations

import sqlite3

from perdure._errors import BackendUnavailableError, SubstrateError

# SQLite primary result codes (https://sqlite.org/rescode.html) that pass: another
# process holds the lock, the file or its folder is briefly read-only or unreachable,
# the disk is full or failing, the schema changed under a prepared statement.
_SQLITE_TRANSIENT = frozenset(
    {
        5,  # SQLITE_BUSY
        6,  # SQLITE_LOCKED
        7,  # SQLITE_NOMEM
        8,  # SQLITE_READONLY
        9,  # SQLITE_INTERRUPT
        10,  # SQLITE_IOERR
        13,  # SQLITE_FULL
        14,  # SQLITE_CANTOPEN
        15,  # SQLITE_PROTOCOL
        17,  # SQLITE_SCHEMA
    }
)

# SQLSTATE classes and codes (https://www.postgresql.org/docs/current/errcodes-appendix.html)
# that pass: connection exceptions, serialization failures and deadlocks, insufficient
# resources, operator intervention (shutdown, restart, statement timeout), system I/O.
_PG_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})
_PG_TRANSIENT_CODES = frozenset({"55P03", "55006"})  # lock_not_available, object_in_use
_PG_PERMANENT_CODES = frozenset({"57P04"})  # database_dropped


def sqlite_error(exc: sqlite3.Error, path: str) -> BackendUnavailableError | SubstrateError:
    """``exc`` from the SQLite file ``path``, typed by its result code."""
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None)
    detail = f"SQLite database {path!r}: {exc}" + (f" ({name})" if name else "")
    if code is None:
        # No result code: a closed connection (ProgrammingError) or a driver-level
        # OperationalError; both mean "not usable now", not "wrong".
        transient = isinstance(exc, sqlite3.OperationalError | sqlite3.ProgrammingError)
    else:
        transient = (code & 0xFF) in _SQLITE_TRANSIENT
    return BackendUnavailableError(detail) if transient else SubstrateError(detail)


def postgres_error(exc: Exception, where: str) -> BackendUnavailableError | SubstrateError:
    """``exc`` from PostgreSQL at ``where`` (host:port/db), typed by its SQLSTATE."""
    import psycopg  # only the PostgreSQL store calls this; SQLite users need no psycopg

    detail = f"PostgreSQL at {where}: {exc}".strip()
    state = getattr(exc, "sqlstate", None)
    if state is None:
        # Errors raised by libpq itself (connection refused, server closed the
        # connection, pool timeout) carry no SQLSTATE.
        transient = not isinstance(exc, psycopg.Error) or isinstance(
            exc, psycopg.OperationalError | psycopg.InterfaceError
        )
    elif state in _PG_PERMANENT_CODES:
        transient = False
    else:
        transient = state[:2] in _PG_TRANSIENT_CLASSES or state in _PG_TRANSIENT_CODES
    if state is not None:
        detail += f" (SQLSTATE {state})"
    return BackendUnavailableError(detail) if transient else SubstrateError(detail)
