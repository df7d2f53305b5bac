"""perdure adapter for the OpenAI Agents SDK: a drop-in DurableRunner.

Importing this package registers the workflow ``openai_agents.run`` that every durable
agent run is, so ``perdure worker my_agents_module`` can resume those runs.
"""

from perdure_openai_agents._model import DurableModel, DurableProvider
from perdure_openai_agents._sessions import JournaledSession
from perdure_openai_agents._workflow import WORKFLOW_NAME, agent_run
from perdure_openai_agents._wrap import durable_tool, in_durable_run
from perdure_openai_agents.runner import (
    DurableResult,
    DurableRunHandle,
    DurableRunner,
    DurableRunResult,
    DurableRunResultStreaming,
    RecordedRunResult,
)
from perdure_openai_agents.session import PerdureSession

__all__ = [
    "WORKFLOW_NAME",
    "DurableModel",
    "DurableProvider",
    "DurableResult",
    "DurableRunHandle",
    "DurableRunResult",
    "DurableRunResultStreaming",
    "DurableRunner",
    "JournaledSession",
    "PerdureSession",
    "RecordedRunResult",
    "agent_run",
    "durable_tool",
    "in_durable_run",
]
