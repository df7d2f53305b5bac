"""SDK exceptions across process boundaries: recorded as data, raised as the SDK's types.

A run that ends in an SDK exception (``MaxTurnsExceeded``, a guardrail tripwire, ...)
records what the exception carries as its last step (``agents:raised``), so the process
that asks for the run's result later — after a worker finished it — raises the same
type with the same fields, not a ``perdure.RunFailedError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn, cast

from agents import Agent, GuardrailFunctionOutput, InputGuardrail, OutputGuardrail
from agents import exceptions as sdk
from agents.guardrail import InputGuardrailResult, OutputGuardrailResult

from perdure.spi import (
    NO_RETRY,
    SerializationError,
    StepFailedError,
    StepSpec,
    from_jsonable,
    recording_run,
    to_jsonable,
)
from perdure_openai_agents._codec import decoding, malformed

RAISED = StepSpec("agents:raised", "step", NO_RETRY)

_BY_NAME: dict[str, type[sdk.AgentsException]] = {
    cls.__name__: cls
    for cls in (
        sdk.AgentsException,
        sdk.MaxTurnsExceeded,
        sdk.ModelBehaviorError,
        sdk.UserError,
        sdk.MCPToolCancellationError,
    )
}


def raise_as_is(exc: BaseException) -> NoReturn:
    """Raise ``exc`` with the ``__context__`` it had: raised while perdure's own error
    is being handled, Python would replace it (the SDK's tests, and users' error
    reports, look at it)."""
    context, suppress = exc.__context__, exc.__suppress_context__
    try:
        raise exc
    finally:
        exc.__context__, exc.__suppress_context__ = context, suppress


@contextlib.contextmanager
def raise_step_failure() -> Iterator[None]:
    """Inside: a step whose call raised. Outside: the exception the call raised (live),
    or, on a replay, the SDK exception of the recorded type."""
    try:
        yield
    except StepFailedError as failed:
        if failed.__cause__ is not None:
            raise_as_is(failed.__cause__)
        cls = _BY_NAME.get(failed.error_type)
        if cls is not None:
            raise cls(failed.error_message) from failed
        raise


def _info(value: Any) -> Any:
    try:
        return {"json": to_jsonable(value, "guardrail output")}
    except SerializationError:
        return {"text": str(value)}


def describe(exc: sdk.AgentsException) -> dict[str, Any]:
    """What a resumed or remote caller needs to raise ``exc`` again."""
    data: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, sdk.InputGuardrailTripwireTriggered):
        result = exc.guardrail_result
        data["guardrail"] = result.guardrail.get_name()
        data["output_info"] = _info(result.output.output_info)
    elif isinstance(exc, sdk.OutputGuardrailTripwireTriggered):
        result = exc.guardrail_result
        data["guardrail"] = result.guardrail.get_name()
        data["output_info"] = _info(result.output.output_info)
        data["agent"] = result.agent.name
        data["agent_output"] = _info(result.agent_output)
    elif isinstance(exc, sdk.ModelRefusalError):
        data["refusal"] = exc.refusal
    elif isinstance(exc, sdk.ModelTimeoutError):
        data["timeout_seconds"] = exc.timeout_seconds
    elif isinstance(exc, sdk.ToolTimeoutError):
        data["tool_name"] = exc.tool_name
        data["timeout_seconds"] = exc.timeout_seconds
    return data


async def record_raised(exc: sdk.AgentsException) -> None:
    """Record ``exc`` as the run's last step (returns the recorded form on a replay)."""
    ctx = recording_run()
    if ctx is None:
        return
    described = describe(exc)

    async def record() -> dict[str, Any]:
        return described

    await ctx.step(RAISED, record, (), {})


def _decode_info(data: Any) -> Any:
    if isinstance(data, dict) and "json" in data:
        return from_jsonable(data["json"], "recorded guardrail output")
    return data.get("text") if isinstance(data, dict) else data


def _agents(start: Agent[Any]) -> Iterator[Agent[Any]]:
    seen: set[int] = set()
    todo: list[Any] = [start]
    while todo:
        agent = todo.pop()
        if not isinstance(agent, Agent) or id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        todo.extend(agent.handoffs)


def _find(guardrails: list[Any], name: str) -> Any:
    return next((g for g in guardrails if g.get_name() == name), None)


async def _unavailable(*_: Any) -> GuardrailFunctionOutput:
    raise sdk.UserError("this guardrail was rebuilt from a run's history; it cannot run")


def rebuild(data: Any, agent: Agent[Any], run_config: Any) -> sdk.AgentsException:
    """The exception ``describe`` recorded, with the user's own guardrail objects;
    ``SerializationError`` when the record is not what ``describe`` wrote."""
    where = "recorded SDK exception"
    if not isinstance(data, dict):
        raise malformed(where, f"expected an object, found {type(data).__name__}")
    with decoding(where):
        return _rebuild(cast(dict[str, Any], data), agent, run_config)


def _number(data: dict[str, Any], key: str) -> float:
    value = data.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise malformed("recorded SDK exception", f"{key!r} is not a number")
    return float(value)


def _rebuild(data: dict[str, Any], agent: Agent[Any], run_config: Any) -> sdk.AgentsException:
    kind = str(data.get("type"))
    message = str(data.get("message", ""))
    configured = list(getattr(run_config, "input_guardrails", None) or [])
    if kind == "InputGuardrailTripwireTriggered":
        name = str(data.get("guardrail"))
        pool = configured + [g for a in _agents(agent) for g in a.input_guardrails]
        guard = _find(pool, name) or InputGuardrail(guardrail_function=_unavailable, name=name)
        output = GuardrailFunctionOutput(_decode_info(data.get("output_info")), True)
        return sdk.InputGuardrailTripwireTriggered(InputGuardrailResult(guard, output))
    if kind == "OutputGuardrailTripwireTriggered":
        name = str(data.get("guardrail"))
        agents = list(_agents(agent))
        pool = list(getattr(run_config, "output_guardrails", None) or [])
        pool += [g for a in agents for g in a.output_guardrails]
        guard = _find(pool, name) or OutputGuardrail(guardrail_function=_unavailable, name=name)
        owner = next((a for a in agents if a.name == data.get("agent")), agent)
        output = GuardrailFunctionOutput(_decode_info(data.get("output_info")), True)
        result = OutputGuardrailResult(guard, _decode_info(data.get("agent_output")), owner, output)
        return sdk.OutputGuardrailTripwireTriggered(result)
    if kind == "ModelRefusalError":
        return sdk.ModelRefusalError(str(data.get("refusal", message)))
    if kind == "ModelTimeoutError":
        return sdk.ModelTimeoutError(_number(data, "timeout_seconds"))
    if kind == "ToolTimeoutError":
        return sdk.ToolTimeoutError(str(data.get("tool_name")), _number(data, "timeout_seconds"))
    return _BY_NAME.get(kind, sdk.AgentsException)(message)
