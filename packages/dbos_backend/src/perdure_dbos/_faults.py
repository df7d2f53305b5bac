"""Which errors of DBOS's system database are transient: core's per-dialect rules,
taught to ``perdure.spi.classify`` for the SQLAlchemy errors DBOS raises.

A transient one (connection lost, server restarting, busy) makes the run's execution
back off and drive again from its stored history; a permanent one parks the run naming
the error. Neither ever becomes the workflow's failure.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy.exc

from perdure.spi import (
    BackendUnavailableError,
    Fault,
    postgres_error,
    register_classifier,
    sqlite_error,
)


def classify_dbos(exc: BaseException) -> Fault | None:
    if not isinstance(exc, sqlalchemy.exc.DBAPIError):
        return None
    orig = exc.orig
    if isinstance(orig, sqlite3.Error):
        typed = sqlite_error(orig, "DBOS system database")
    elif isinstance(orig, Exception) and type(orig).__module__.startswith("psycopg"):
        typed = postgres_error(orig, "DBOS system database")
    else:
        return "transient" if isinstance(exc, sqlalchemy.exc.OperationalError) else None
    return "transient" if isinstance(typed, BackendUnavailableError) else "permanent"


def register() -> None:
    register_classifier(classify_dbos)
