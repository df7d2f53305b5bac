"""``perdure console``: a small server-rendered web app over any backend.

Runs list with filters and a summary bar, run pages with the history as a timeline,
approve / reject / cancel / resume / reconcile for logged-in operators, JSONL export
and Prometheus metrics. Everything goes through the ``Backend`` API, so it works the
same on SQLite, PostgreSQL, Temporal and DBOS. Needs the ``perdure[console]`` extra.
"""

from perdure._console._actions import (
    Action,
    ActionInvalid,
    ActionRefused,
    Authorize,
    any_operator,
    perform,
)
from perdure._console._app import ConsoleSettings, create_app

__all__ = [
    "Action",
    "ActionInvalid",
    "ActionRefused",
    "Authorize",
    "ConsoleSettings",
    "any_operator",
    "create_app",
    "perform",
]
