"""JSON forms of what the Agents SDK hands us: model responses and tool outputs.

A model response is stored as ``{"output": [...], "usage": {...}, "response_id": ...}``
with output items dumped ``by_alias=True, exclude_unset=True`` so that the next turn's
input, built by the SDK with ``exclude_unset``, is byte-identical after a replay.

Decoding checks the recorded shape first: a record that is not what this module wrote
(a hand-edited or corrupt row, a record of another version) raises
``SerializationError`` naming the record and the field, never a bare ``KeyError`` or
``TypeError`` from deep inside the SDK.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any, cast

from agents.items import ItemHelpers, ModelResponse
from agents.usage import Usage, deserialize_usage, serialize_usage
from openai.types.responses import (
    Response,
    ResponseOutputItem,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, TypeAdapter, ValidationError

from perdure.spi import SerializationError
from perdure_openai_agents._compat import request_id_of

_ITEM = TypeAdapter(ResponseOutputItem)
_RAW = "__perdure_raw_item__"
#: Integer fields of a stored usage; deserialize_usage would take any value for them.
_USAGE_COUNTS = ("requests", "input_tokens", "output_tokens", "total_tokens")


def malformed(where: str, detail: str) -> SerializationError:
    """The error for a record that is not what this adapter wrote."""
    return SerializationError(f"malformed {where}: {detail}")


@contextlib.contextmanager
def decoding(where: str) -> Iterator[None]:
    """Turn what the SDK's and pydantic's validators raise on a bad record into a
    ``SerializationError`` that says where (the values themselves are left out: a
    record may hold a user's data)."""
    try:
        yield
    except SerializationError:
        raise
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors(include_input=False, include_url=False)
        )
        raise malformed(where, fields) from None
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise malformed(where, f"{type(exc).__name__} while decoding it") from None


def _object(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise malformed(where, f"expected an object, found {type(data).__name__}")
    return cast(dict[str, Any], data)


def _optional_str(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise malformed(where, f"{key!r} is a {type(value).__name__}, not a string")
    return value


def dump_output_item(item: Any) -> Any:
    """One output item as JSON; non-pydantic items (plain dicts) are kept verbatim."""
    if isinstance(item, BaseModel):
        return _ITEM.dump_python(item, mode="json", by_alias=True, exclude_unset=True)  # type: ignore[arg-type]
    return {_RAW: item}


def load_output_item(data: Any, where: str = "recorded output item") -> Any:
    obj = _object(data, where)
    if _RAW in obj:
        return obj[_RAW]
    with decoding(where):
        return _ITEM.validate_python(obj)


def dump_model_response(response: ModelResponse) -> dict[str, Any]:
    """A ``ModelResponse`` as JSON data that ``load_model_response`` restores exactly."""
    return {
        "output": [dump_output_item(item) for item in response.output],
        "usage": serialize_usage(response.usage),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


def _load_usage(data: Any, where: str) -> Usage:
    usage = _object(data, where + " usage")
    for key in _USAGE_COUNTS:
        value = usage.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise malformed(where, f"usage {key!r} is a {type(value).__name__}, not an integer")
    entries = usage.get("request_usage_entries")
    if entries is not None and not (
        isinstance(entries, list) and all(isinstance(e, dict) for e in cast(list[Any], entries))
    ):
        raise malformed(where, "usage 'request_usage_entries' is not a list of objects")
    with decoding(where + " usage"):
        return deserialize_usage(usage)


def load_model_response(data: Any, where: str = "recorded model response") -> ModelResponse:
    obj = _object(data, where)
    output = obj.get("output")
    if not isinstance(output, list):
        raise malformed(where, "'output' is missing or not a list")
    raw_usage = obj.get("raw_usage")
    if raw_usage is not None and not isinstance(raw_usage, dict):
        raise malformed(where, f"'raw_usage' is a {type(raw_usage).__name__}, not an object")
    items = [
        load_output_item(item, f"{where} output #{i}")
        for i, item in enumerate(cast(list[Any], output))
    ]
    return ModelResponse(
        output=items,
        usage=_load_usage(obj.get("usage"), where),
        response_id=_optional_str(obj, "response_id", where),
        request_id=_optional_str(obj, "request_id", where),
        raw_usage=cast(dict[str, Any] | None, raw_usage),
    )


def model_record(record: Any, where: str) -> tuple[dict[str, Any], list[str] | None, str]:
    """The stored response, the offered tool names and the step key of a recorded model
    step."""
    obj = _object(record, where)
    key = _optional_str(obj, "key", where) or "model"
    response = _object(obj.get("response"), where + " response")
    offered = obj.get("offered")
    if offered is not None and not (
        isinstance(offered, list) and all(isinstance(n, str) for n in cast(list[Any], offered))
    ):
        raise malformed(where, "'offered' is not a list of tool names")
    return response, cast(list[str] | None, offered), key


def tool_record(record: Any, where: str) -> tuple[Any, bool]:
    """The recorded output of a tool step and whether the SDK generated it as an error."""
    obj = _object(record, where)
    if "output" not in obj:
        raise malformed(where, "'output' is missing")
    sdk_error = obj.get("sdk_error", False)
    if not isinstance(sdk_error, bool):
        raise malformed(where, f"'sdk_error' is a {type(sdk_error).__name__}, not a bool")
    return obj["output"], sdk_error


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


def response_for_stream(data: Any, where: str = "recorded model response") -> Response:
    """A terminal ``Response`` carrying a stored model call, for a replayed stream."""
    resp = load_model_response(data, where)
    with decoding(where):
        response = _terminal_response(resp)
    if resp.response_id is None:
        object.__setattr__(response, "id", None)
    return response


def _terminal_response(resp: ModelResponse) -> Response:
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
    return Response(
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
