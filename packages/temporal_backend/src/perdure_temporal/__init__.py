"""perdure backend on a Temporal server."""

__all__: list[str] = []
