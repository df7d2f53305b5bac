"""perdure adapter for the OpenAI Agents SDK: a drop-in DurableRunner."""

__all__: list[str] = []
