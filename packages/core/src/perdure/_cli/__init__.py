"""The ``perdure`` command line: operate durable runs on any backend.

Commands: ``runs list|show|export``, ``signal``, ``approve``, ``reject``, ``resume``,
``cancel``, ``reconcile``, ``worker`` and ``demo``. Each takes ``--url`` (else
``PERDURE_URL``, else ``[tool.perdure] url`` in the nearest ``pyproject.toml``, else
``sqlite:///perdure.db``).

Exit codes a script can rely on:

====  =============================================================================
0     ok
1     unexpected error
2     usage or bad input (unknown option, invalid ``--data`` JSON, unimportable module)
3     run not found (``RunNotFoundError``)
4     backend unavailable (``BackendUnavailableError``)
5     invalid state for the operation (``InvalidRunStateError``)
6     configuration error (``ConfigurationError``, including a malformed URL)
====  =============================================================================

Errors print one line ``error: <message>`` on stderr, never a traceback, unless
``PERDURE_DEBUG=1``.
"""

from perdure._cli.app import app, main
from perdure._cli.common import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INVALID_STATE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)

__all__ = [
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_INVALID_STATE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "app",
    "main",
]
