"""perdure backend on a Temporal server (not implemented yet).

``temporal://`` URLs reach ``open_backend``, which says so plainly instead of letting
the URL look unknown.
"""

from perdure.backend import Backend
from perdure.errors import ConfigurationError

__all__ = ["open_backend"]


def open_backend(url: str) -> Backend:
    """Refuse ``url`` with the reason: the Temporal backend has not landed yet."""
    raise ConfigurationError(
        f"{url!r}: the Temporal backend of perdure is not implemented yet; use sqlite:/// "
        "or postgresql:// meanwhile (the agent code stays the same)"
    )
