"""perdure adapter for LangGraph: a durable checkpointer, recovery and durable side effects.

Importing it registers the ``langgraph.thread`` workflow, so ``perdure worker MODULE``
resumes the threads of any graph that ``MODULE`` wraps with ``durable(...)``.
"""

from perdure_langgraph._codec import CorruptCheckpointError
from perdure_langgraph._serde import DisallowedTypeError
from perdure_langgraph.durable import DurableGraph, durable, turn_run_id
from perdure_langgraph.saver import PRUNE_STRATEGIES, PerdureSaver

__all__: list[str] = [
    "PRUNE_STRATEGIES",
    "CorruptCheckpointError",
    "DisallowedTypeError",
    "DurableGraph",
    "PerdureSaver",
    "durable",
    "turn_run_id",
]
