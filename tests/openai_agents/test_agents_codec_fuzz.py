"""Malformed records in the Agents adapter's codec raise ``SerializationError``.

A record read back from a run's history (a model response, a tool output, an SDK
exception) may be corrupt or hand-edited. Decoding it must either give the value back
or raise perdure's typed error naming the record — never a bare ``KeyError``,
``TypeError`` or ``AttributeError`` from deep inside the SDK or pydantic. Hypothesis
generates arbitrary JSON and mutations of valid records (bounded example counts).
"""

from __future__ import annotations

from typing import Any

from agents import Agent
from agents.items import ModelResponse
from agents.usage import Usage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from perdure._errors import SerializationError
from perdure_openai_agents import _codec, _errors

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _valid_response() -> dict[str, Any]:
    message = ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="hi", annotations=[])],
    )
    response = ModelResponse(
        output=[message], usage=Usage(requests=1, input_tokens=3), response_id="resp_1"
    )
    return _codec.dump_model_response(response)


def _valid_model_record() -> dict[str, Any]:
    return {"response": _valid_response(), "offered": ["tool_a"], "key": "3:model"}


@st.composite
def _mutated(draw: st.DrawFn, valid: dict[str, Any]) -> Any:
    record: Any = _copy(valid)
    target = record
    nested = [k for k, v in record.items() if isinstance(v, dict) and v]
    if nested and draw(st.booleans()):
        target = record[draw(st.sampled_from(nested))]
    key = draw(st.sampled_from(sorted(target)))
    if draw(st.booleans()):
        del target[key]
    else:
        target[key] = draw(json_values)
    return record


def _mutations(valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    """``valid`` with one field (at the top or one level down) replaced or dropped."""
    return _mutated(valid)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [_copy(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


def _decodes_or_raises_typed(decode: Any, record: Any) -> None:
    try:
        decode(record)
    except SerializationError as exc:
        assert "malformed" in str(exc) or "decode" in str(exc), str(exc)
    # Anything else (KeyError, TypeError, AttributeError, ValidationError) fails the test.


def test_valid_records_round_trip() -> None:
    response = _codec.load_model_response(_valid_response())
    assert response.response_id == "resp_1"
    assert response.usage.input_tokens == 3
    assert _codec.dump_model_response(response) == _valid_response()
    stored, offered, key = _codec.model_record(_valid_model_record(), "model call")
    assert (offered, key) == (["tool_a"], "3:model")
    assert _codec.response_for_stream(stored).id == "resp_1"
    assert _codec.tool_record({"output": 7, "sdk_error": False}, "tool call") == (7, False)


@FUZZ
@given(json_values)
def test_any_json_as_a_model_response(record: Any) -> None:
    _decodes_or_raises_typed(_codec.load_model_response, record)
    _decodes_or_raises_typed(_codec.response_for_stream, record)


@FUZZ
@given(_mutations(_valid_response()))
def test_a_mutated_model_response(record: Any) -> None:
    _decodes_or_raises_typed(_codec.load_model_response, record)
    _decodes_or_raises_typed(_codec.response_for_stream, record)


@FUZZ
@given(st.one_of(json_values, _mutations(_valid_model_record())))
def test_a_malformed_model_step_record(record: Any) -> None:
    def decode(value: Any) -> None:
        stored, _, _ = _codec.model_record(value, "recorded model call")
        _codec.load_model_response(stored)

    _decodes_or_raises_typed(decode, record)


@FUZZ
@given(json_values)
def test_any_json_as_an_output_item(record: Any) -> None:
    _decodes_or_raises_typed(_codec.load_output_item, record)


@FUZZ
@given(st.one_of(json_values, _mutations({"output": "ok", "sdk_error": True})))
def test_a_malformed_tool_step_record(record: Any) -> None:
    _decodes_or_raises_typed(lambda r: _codec.tool_record(r, "recorded tool call"), record)


_AGENT = Agent(name="fuzzed")
_RAISED = [
    {"type": "MaxTurnsExceeded", "message": "too many"},
    {"type": "ModelTimeoutError", "message": "slow", "timeout_seconds": 2.5},
    {"type": "ToolTimeoutError", "message": "slow", "tool_name": "t", "timeout_seconds": 1},
    {
        "type": "InputGuardrailTripwireTriggered",
        "message": "no",
        "guardrail": "g",
        "output_info": {"json": {"why": "x"}},
    },
    {
        "type": "OutputGuardrailTripwireTriggered",
        "message": "no",
        "guardrail": "g",
        "output_info": {"text": "x"},
        "agent": "fuzzed",
        "agent_output": {"json": "out"},
    },
]


@FUZZ
@given(st.one_of(json_values, *(_mutations(r) for r in _RAISED)))
def test_a_malformed_recorded_exception(record: Any) -> None:
    _decodes_or_raises_typed(lambda r: _errors.rebuild(r, _AGENT, None), record)


def test_a_recorded_exception_rebuilds_as_its_type() -> None:
    from agents.exceptions import InputGuardrailTripwireTriggered, ToolTimeoutError

    rebuilt = _errors.rebuild(_RAISED[3], _AGENT, None)
    assert isinstance(rebuilt, InputGuardrailTripwireTriggered)
    assert rebuilt.guardrail_result.output.output_info == {"why": "x"}
    timeout = _errors.rebuild(_RAISED[2], _AGENT, None)
    assert isinstance(timeout, ToolTimeoutError) and timeout.timeout_seconds == 1.0
