"""perdure backend on DBOS Transact: ``dbos+sqlite:///path.db``, ``dbos+postgresql://...``."""

from perdure_dbos._backend import (
    DbosBackend,
    DbosUrl,
    application_version,
    open_backend,
    state_url,
)
from perdure_dbos._serializer import JsonSerializer

__all__ = [
    "DbosBackend",
    "DbosUrl",
    "JsonSerializer",
    "application_version",
    "open_backend",
    "state_url",
]
