"""The scripted agents of ``benchmarks.temporal_plugins``, the same script on every side.

This module imports only LangGraph, LangChain Core and the OpenAI Agents SDK (never
perdure), so Temporal's plugins can import it from their own virtualenv. Each agent takes
``n`` notes, one per turn, then answers:

* a turn is one model call that asks for the ``take_note`` tool with a ~1 KB note, then
  the tool's ~1 KB reply; the transcript grows by ~2 KB a turn;
* the model's reply depends only on the transcript (how many notes it holds, and ``n``,
  read from the first user message), so it is the same in any process and on a replay;
* every model call is timed here (``MODEL_CALLS``), in the process that runs it: the
  interval from one model call to the next is the latency of one turn, and the wall
  times split the run's Temporal history into turns.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

TOOL = "take_note"
NOTE_CHARS = 1024
LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
)
_NOTES = re.compile(r"take (\d+) notes")

#: ``(time.time(), time.perf_counter())`` of each model call in this process, oldest
#: first; a benchmark clears it before each run.
MODEL_CALLS: list[tuple[float, float]] = []


def prose(tag: str, n: int = NOTE_CHARS) -> str:
    """``n`` characters of prose starting with ``tag``."""
    return (tag + " " + LOREM * (n // len(LOREM) + 2))[:n]


def prompt(notes: int) -> str:
    """The user's one message: how many notes to take."""
    return f"take {notes} notes"


def archived(note: str) -> str:
    """The body of the ``take_note`` tool: a ~1 KB receipt of the note."""
    return prose(f"[archived {len(note)} chars]")


def final_answer(notes: int) -> str:
    """What the agent answers after its last note."""
    return f"done after {notes} notes"


def _next(first_user_text: str, notes_taken: int) -> str | None:
    """The note to take next, or None when the agent is done."""
    MODEL_CALLS.append((time.time(), time.perf_counter()))
    match = _NOTES.search(first_user_text)
    wanted = int(match.group(1)) if match else 0
    return prose(f"[note {notes_taken + 1}]") if notes_taken < wanted else None


# -- LangGraph -------------------------------------------------------------------------------


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else json.dumps(message.content)


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model following the script (no network)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        first = next((m for m in messages if isinstance(m, HumanMessage)), None)
        taken = sum(isinstance(m, ToolMessage) for m in messages)
        note = _next(_text(first) if first else "", taken)
        if note is None:
            reply = AIMessage(content=final_answer(taken))
        else:
            call = {"name": TOOL, "args": {"note": note}, "id": f"call-{taken + 1}"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        return self._generate(messages)


CHAT_MODEL = ScriptedChatModel()


def _messages(state: MessagesState | dict[str, Any]) -> list[AnyMessage]:
    # Temporal's plugin hands a node its state as JSON-decoded dicts.
    return list(convert_to_messages(state["messages"]))  # pyright: ignore[reportArgumentType]


async def agent_node(state: MessagesState) -> dict[str, Any]:
    """The model call."""
    return {"messages": [await CHAT_MODEL.ainvoke(_messages(state))]}


async def tools_node(state: MessagesState) -> dict[str, Any]:
    """Run the tool calls of the last model reply."""
    last = _messages(state)[-1]
    calls = last.tool_calls if isinstance(last, AIMessage) else []
    return {
        "messages": [
            ToolMessage(content=archived(**call["args"]), tool_call_id=call["id"]) for call in calls
        ]
    }


async def route(state: MessagesState) -> str:
    """To the tools while the model asks for one, else the end (async: in Temporal's
    workflow no thread may run it)."""
    last = _messages(state)[-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def build_graph(node_metadata: dict[str, Any] | None = None) -> StateGraph[Any, Any, Any, Any]:
    """The ReAct loop: agent -> tools -> agent ... -> end. ``node_metadata`` goes on both
    nodes (Temporal's plugin reads its activity options there)."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node, metadata=node_metadata)
    builder.add_node("tools", tools_node, metadata=node_metadata)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def recursion_limit(notes: int) -> int:
    """Enough supersteps for ``notes`` turns (two per turn, one for the answer)."""
    return 2 * notes + 10


# -- OpenAI Agents SDK -----------------------------------------------------------------------


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _first_user_text(items: Sequence[Any]) -> str:
    for item in items:
        if _get(item, "role") == "user":
            content = _get(item, "content")
            if isinstance(content, str):
                return content
            return "".join(str(_get(c, "text") or "") for c in content or [])
    return ""


class ScriptedAgentModel(Model):
    """An Agents SDK model following the script (no network). The signatures of
    ``Model``'s methods differ between SDK releases: only ``input`` is read."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        raw = kwargs.get("input", args[1] if len(args) > 1 else "")
        items: list[Any] = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
        taken = sum(_get(i, "type") == "function_call_output" for i in items)
        note = _next(_first_user_text(items), taken)
        if note is None:
            text = ResponseOutputText(text=final_answer(taken), type="output_text", annotations=[])
            output: Any = ResponseOutputMessage(
                id=f"msg-{taken}", content=[text], role="assistant", status="completed",
                type="message",
            )  # fmt: skip
        else:
            output = ResponseFunctionToolCall(
                arguments=json.dumps({"note": note}), call_id=f"call-{taken + 1}", name=TOOL,
                type="function_call", id=f"fc-{taken + 1}", status="completed",
            )  # fmt: skip
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        raise NotImplementedError("the benchmark does not stream")
