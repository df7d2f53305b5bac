"""perdure backend on DBOS Transact."""

__all__: list[str] = []
