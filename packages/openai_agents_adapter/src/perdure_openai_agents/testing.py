"""A deterministic model for tests and demos: its reply depends only on the conversation.

``ScriptedModel`` keeps its script position in memory, so a process restart loses it.
``ConversationModel`` decides each reply from the conversation so far — the same input
gives the same reply in any process — which is what crash and resume tests need::

    def respond(conv: Conversation) -> Reply:
        if not conv.called("lookup"):
            return tool_call("lookup", {"order_id": "42"})
        return f"order is {conv.output_of('lookup')}"

    agent = Agent(name="a", model=ConversationModel(respond), tools=[lookup])
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseOutputMessage

__all__ = ["Conversation", "ConversationModel", "Reply", "ToolCall", "tool_call"]


@dataclass(frozen=True)
class ToolCall:
    """A tool call to make; ``call_id`` defaults to one derived from the conversation."""

    name: str
    arguments: Mapping[str, Any]
    call_id: str | None = None


def tool_call(
    name: str, arguments: Mapping[str, Any] | None = None, *, call_id: str | None = None
) -> ToolCall:
    """Reply with a call of tool ``name``."""
    return ToolCall(name, dict(arguments or {}), call_id)


#: What a responder returns: text, one tool call, several (parallel) tool calls, or
#: output items / a full ``ModelResponse``.
Reply = str | ToolCall | Sequence[ToolCall] | ModelResponse | Sequence[Any]


def _get(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)  # pyright: ignore[reportUnknownMemberType]
    return getattr(item, key, None)


@dataclass(frozen=True)
class Conversation:
    """The model input of one call, as plain data."""

    items: list[Any]
    instructions: str | None
    tools: list[str]

    def of_type(self, kind: str) -> list[Any]:
        return [i for i in self.items if _get(i, "type") == kind]

    @property
    def user_messages(self) -> list[str]:
        """Text of every user message, oldest first."""
        out: list[str] = []
        for item in self.items:
            if _get(item, "role") != "user":
                continue
            content = _get(item, "content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.append(
                    "".join(str(_get(c, "text") or "") for c in content)  # pyright: ignore[reportUnknownVariableType]
                )
        return out

    @property
    def last_user_message(self) -> str:
        messages = self.user_messages
        return messages[-1] if messages else ""

    @property
    def calls(self) -> list[tuple[str, str, Any]]:
        """``(name, call_id, arguments)`` of every tool call so far."""
        out: list[tuple[str, str, Any]] = []
        for item in self.of_type("function_call"):
            raw = _get(item, "arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                args = raw
            out.append((str(_get(item, "name")), str(_get(item, "call_id")), args))
        return out

    def called(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.calls)

    def outputs_of(self, name: str) -> list[str]:
        """Outputs of every call of tool ``name``, oldest first."""
        ids = [cid for n, cid, _ in self.calls if n == name]
        by_id = {
            _get(i, "call_id"): _get(i, "output") for i in self.of_type("function_call_output")
        }
        return [str(by_id[c]) for c in ids if c in by_id]

    def output_of(self, name: str) -> str | None:
        """Output of the latest call of tool ``name``, or None."""
        outputs = self.outputs_of(name)
        return outputs[-1] if outputs else None

    @property
    def outputs(self) -> int:
        """How many assistant messages and tool calls the conversation already holds."""
        messages = [i for i in self.items if _get(i, "role") == "assistant"]
        return len(self.of_type("function_call")) + len(messages)


class ConversationModel(Model):
    """A model whose reply is ``respond(conversation)``: deterministic across processes.

    ``on_call`` (optional) sees each conversation first — e.g. to count calls from
    outside the process. Tool call ids are derived from the conversation length.
    """

    def __init__(
        self,
        respond: Callable[[Conversation], Reply],
        *,
        on_call: Callable[[Conversation], None] | None = None,
    ) -> None:
        self.respond = respond
        self.on_call = on_call
        self.calls = 0

    def _conversation(
        self, system_instructions: str | None, input: Any, tools: Any
    ) -> Conversation:
        if isinstance(input, str):
            items: list[Any] = [{"role": "user", "content": input}]
        else:
            items = list(input)
        names = [str(getattr(t, "name", type(t).__name__)) for t in tools or []]
        return Conversation(items, system_instructions, names)

    def _step(self, conv: Conversation) -> ModelStep:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(conv)
        reply = self.respond(conv)
        if isinstance(reply, ModelResponse):
            return ModelStep(
                output=list(reply.output), usage=reply.usage, response_id=reply.response_id
            )
        if isinstance(reply, str):
            output: list[Any] = [assistant_message(reply, item_id=f"msg-{len(conv.items)}")]
        elif isinstance(reply, ToolCall):
            output = [self._call(reply, conv, 0)]
        else:
            output = [
                self._call(r, conv, i) if isinstance(r, ToolCall) else r
                for i, r in enumerate(reply)
            ]
        return ModelStep(output=output, response_id=f"resp-{len(conv.items)}")

    @staticmethod
    def _call(call: ToolCall, conv: Conversation, index: int) -> Any:
        call_id = call.call_id or f"call-{len(conv.items)}-{index}"
        return function_call(call.name, dict(call.arguments), call_id=call_id)

    def _scripted(self, *args: Any, **kwargs: Any) -> ScriptedModel:
        system = kwargs.get("system_instructions", args[0] if args else None)
        input = kwargs.get("input", args[1] if len(args) > 1 else "")
        tools = kwargs.get("tools", args[3] if len(args) > 3 else [])
        return ScriptedModel([self._step(self._conversation(system, input, tools))])

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        return await self._scripted(*args, **kwargs).get_response(*args, **kwargs)

    async def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:  # type: ignore[override]
        async for event in self._scripted(*args, **kwargs).stream_response(*args, **kwargs):
            yield event


def message_text(item: Any) -> str:
    """The text of an output message item (for assertions)."""
    if isinstance(item, ResponseOutputMessage):
        return "".join(getattr(c, "text", "") for c in item.content)
    return ""
