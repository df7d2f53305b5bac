"""perdure backend on DBOS Transact: ``dbos+sqlite:///path.db``, ``dbos+postgresql://...``."""

from perdure_dbos import _faults
from perdure_dbos._backend import (
    DbosBackend,
    DbosUrl,
    application_version,
    open_backend,
    state_url,
)
from perdure_dbos._compat import refuse_pickle
from perdure_dbos._serializer import JsonSerializer

# Before anything can reach DBOS through perdure: nothing in this process unpickles.
refuse_pickle()
_faults.register()

__all__ = [
    "DbosBackend",
    "DbosUrl",
    "JsonSerializer",
    "application_version",
    "open_backend",
    "state_url",
]
