"""JSON forms of what the Agents SDK hands us: model responses and tool outputs.

A model response is stored as ``{"output": [...], "usage": {...}, "response_id": ...}``
with output items dumped ``by_alias=True, exclude_unset=True`` so that the next turn's
input, built by the SDK with ``exclude_unset``, is byte-identical after a replay.
"""

from __future__ import annotations

import math
from typing import Any

from agents.items import ItemHelpers, ModelResponse
from agents.usage import Usage, deserialize_usage, serialize_usage
from openai.types.responses import (
    Response,
    ResponseOutputItem,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, TypeAdapter

from perdure_openai_agents._compat import request_id_of

_ITEM = TypeAdapter(ResponseOutputItem)
_RAW = "__perdure_raw_item__"


def dump_output_item(item: Any) -> Any:
    """One output item as JSON; non-pydantic items (plain dicts) are kept verbatim."""
    if isinstance(item, BaseModel):
        return _ITEM.dump_python(item, mode="json", by_alias=True, exclude_unset=True)  # type: ignore[arg-type]
    return {_RAW: item}


def load_output_item(data: Any) -> Any:
    if isinstance(data, dict) and _RAW in data:
        return data[_RAW]
    return _ITEM.validate_python(data)


def dump_model_response(response: ModelResponse) -> dict[str, Any]:
    """A ``ModelResponse`` as JSON data that ``load_model_response`` restores exactly."""
    return {
        "output": [dump_output_item(item) for item in response.output],
        "usage": serialize_usage(response.usage),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


def load_model_response(data: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        output=[load_output_item(item) for item in data["output"]],
        usage=deserialize_usage(data["usage"]),
        response_id=data.get("response_id"),
        request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )


def model_response_from_stream(response: Response, done_items: list[Any]) -> dict[str, Any]:
    """The stored form of a streamed model call, from its terminal ``response.completed``.

    As the SDK does, an empty terminal output falls back to the ``output_item.done`` items.
    """
    output = list(response.output) or list(done_items)
    usage = Usage()
    if response.usage is not None:
        u = response.usage
        usage = Usage(
            requests=1,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            total_tokens=u.total_tokens,
            input_tokens_details=u.input_tokens_details,  # type: ignore[arg-type]
            output_tokens_details=u.output_tokens_details,  # type: ignore[arg-type]
        )
    else:
        usage = Usage(requests=1)
    return dump_model_response(
        ModelResponse(
            output=output,
            usage=usage,
            response_id=response.id,
            request_id=request_id_of(response),
        )
    )


def response_for_stream(data: dict[str, Any]) -> Response:
    """A terminal ``Response`` carrying a stored model call, for a replayed stream."""
    resp = load_model_response(data)
    u = resp.usage
    usage = ResponseUsage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        total_tokens=u.total_tokens,
        input_tokens_details=InputTokensDetails.model_validate(
            {
                "cached_tokens": getattr(u.input_tokens_details, "cached_tokens", 0) or 0,
                "cache_write_tokens": getattr(u.input_tokens_details, "cache_write_tokens", 0) or 0,
            }
        ),
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=getattr(u.output_tokens_details, "reasoning_tokens", 0) or 0
        ),
    )
    response = Response(
        id=resp.response_id or "perdure-replayed",
        created_at=0,
        model="perdure-replayed",
        object="response",
        output=list(resp.output),
        tool_choice="auto",
        tools=[],
        top_p=None,
        parallel_tool_calls=True,
        status="completed",
        usage=usage,
    )
    if resp.response_id is None:
        object.__setattr__(response, "id", None)
    return response


def is_plain_json(value: Any, depth: int = 0) -> bool:
    """True for values that survive a JSON round trip unchanged (and print the same)."""
    if depth > 64:
        return False
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(is_plain_json(v, depth + 1) for v in value)  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and is_plain_json(v, depth + 1)
            for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
        )
    return False


def _is_structured_output(value: Any) -> bool:
    from agents.tool import ToolOutputFileContent, ToolOutputImage, ToolOutputText

    kinds = (ToolOutputText, ToolOutputImage, ToolOutputFileContent)
    if isinstance(value, kinds):
        return True
    return isinstance(value, list) and bool(value) and all(isinstance(v, kinds) for v in value)  # pyright: ignore[reportUnknownVariableType]


def encode_tool_output(value: Any, tool_call: Any) -> Any:
    """What a tool step records: the value itself when it is plain JSON or one of the
    SDK's structured outputs, else the string the model sees. Live and replayed runs
    both continue with this recorded form, so they see the same thing."""
    if is_plain_json(value) or _is_structured_output(value):
        return value
    if tool_call is not None:
        visible = ItemHelpers.tool_call_output_item(tool_call, value)["output"]
        if isinstance(visible, str):
            return visible
    return str(value)
