"""perdure adapter for LangGraph: a durable checkpointer, recovery and durable side effects."""

__all__: list[str] = []
