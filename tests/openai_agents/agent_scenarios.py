"""Agents the adapter tests run, in worker processes and in the test process.

Every side effect, and every model call, is a POST to the test's receiver
(``PERDURE_TEST_RECEIVER``), so counts are taken outside the worker. Endpoint names
carry the order id, so one process can hold several runs at different points.
``AGENT_VARIANT=v2`` adds a tool to ``changing_agent`` under its in-flight runs.

``python -m agent_scenarios AGENT RUN_ID ORDER [--session ID] [--stream]`` starts a
run and drives it until it stops (or the test kills the process).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrail,
    RunContextWrapper,
    RunHooks,
    SQLiteSession,
    function_tool,
)
from agents.run_state import RunState

import perdure
from perdure.testing import post
from perdure_openai_agents import DurableRunner, PerdureSession
from perdure_openai_agents.testing import Conversation, ConversationModel, Reply, tool_call


def _url(path: str) -> str:
    return f"{os.environ['PERDURE_TEST_RECEIVER']}/{path}"


def _order(conv: Conversation) -> str:
    return conv.user_messages[0].split()[-1]


def _count_model_call(conv: Conversation) -> None:
    post(_url(f"plain/model-{_order(conv)}"), {"items": len(conv.items)})


# -- tools --------------------------------------------------------------------------


@function_tool
async def lookup(order_id: str) -> str:
    """Look up an order (read-only)."""
    await asyncio.to_thread(post, _url(f"plain/lookup-{order_id}"), {"order": order_id})
    return json.dumps({"order": order_id, "cents": 4200})


@function_tool
@perdure.effect(idempotent_receiver=True)
def charge(order_id: str, cents: int) -> str:
    """Charge the customer; the payment service dedupes on the idempotency key."""
    answer = post(
        _url(f"dedup/charge-{order_id}"),
        {"order": order_id, "cents": cents},
        key=perdure.idempotency_key(),
    )
    return str(answer["id"])


@function_tool
@perdure.effect()
def email(order_id: str) -> str:
    """Email the customer; the relay cannot dedupe."""
    answer = post(_url(f"plain/email-{order_id}"), {"order": order_id})
    return str(answer["id"])


@function_tool(needs_approval=True)
async def refund(order_id: str, cents: int) -> str:
    """Refund an order (needs a human's approval)."""
    answer = await asyncio.to_thread(
        post,
        _url(f"dedup/refund-{order_id}"),
        {"order": order_id, "cents": cents},
        key=perdure.idempotency_key(),
    )
    return f"refunded {cents} as {answer['id']}"


@function_tool
async def para_a(order_id: str) -> str:
    """One of two tools the model calls in parallel."""
    await asyncio.to_thread(post, _url(f"plain/para_a-{order_id}"), {"order": order_id})
    return f"a:{order_id}"


@function_tool
async def para_b(order_id: str) -> str:
    """The other of the two parallel tools."""
    await asyncio.to_thread(post, _url(f"plain/para_b-{order_id}"), {"order": order_id})
    return f"b:{order_id}"


@function_tool
def audit(order_id: str) -> str:
    """A tool only the v2 agent has."""
    return f"audited {order_id}"


# -- models -------------------------------------------------------------------------


def refund_flow(conv: Conversation) -> Reply:
    """lookup → charge (idempotent receiver) → email (non-idempotent) → answer."""
    order = _order(conv)
    if not conv.called("lookup"):
        return tool_call("lookup", {"order_id": order})
    if not conv.called("charge"):
        return tool_call("charge", {"order_id": order, "cents": 4200})
    if not conv.called("email"):
        return tool_call("email", {"order_id": order})
    return (
        f"refunded order {order}: charge {conv.output_of('charge')}, mail {conv.output_of('email')}"
    )


def approval_flow(conv: Conversation) -> Reply:
    """lookup → refund (needs approval) → answer."""
    order = _order(conv)
    if not conv.called("lookup"):
        return tool_call("lookup", {"order_id": order})
    if not conv.called("refund"):
        return tool_call("refund", {"order_id": order, "cents": 4200})
    return f"order {order}: {conv.output_of('refund')}"


def parallel_flow(conv: Conversation) -> Reply:
    """para_a and para_b in one model response, then lookup, then answer."""
    order = _order(conv)
    if not conv.called("para_a"):
        return [tool_call("para_a", {"order_id": order}), tool_call("para_b", {"order_id": order})]
    if not conv.called("lookup"):
        return tool_call("lookup", {"order_id": order})
    return f"{conv.output_of('para_a')} {conv.output_of('para_b')} {order}"


def session_flow(conv: Conversation) -> Reply:
    """lookup → charge → answer, within the latest user turn of a session."""
    order = _order(conv)
    user_turns = len(conv.user_messages)
    if len(conv.outputs_of("lookup")) < user_turns:
        return tool_call("lookup", {"order_id": order})
    if len(conv.outputs_of("charge")) < user_turns:
        return tool_call("charge", {"order_id": order, "cents": 100})
    return f"turn {user_turns} done for {order}"


refund_agent = Agent(
    name="refunds",
    instructions="Refund orders.",
    model=ConversationModel(refund_flow, on_call=_count_model_call),
    tools=[lookup, charge, email],
)
approval_agent = Agent(
    name="approvals",
    instructions="Refund orders after approval.",
    model=ConversationModel(approval_flow, on_call=_count_model_call),
    tools=[lookup, refund],
)
parallel_agent = Agent(
    name="parallel",
    model=ConversationModel(parallel_flow, on_call=_count_model_call),
    tools=[para_a, para_b, lookup],
)
session_agent = Agent(
    name="session",
    model=ConversationModel(session_flow, on_call=_count_model_call),
    tools=[lookup, charge],
)
changing_agent = Agent(
    name="changing",
    model=ConversationModel(approval_flow, on_call=_count_model_call),
    tools=[lookup, refund],
)

if os.environ.get("AGENT_VARIANT") == "v2":
    changing_agent = Agent(
        name="changing",
        model=ConversationModel(approval_flow, on_call=_count_model_call),
        tools=[lookup, refund, audit],  # a tool added under in-flight runs
    )


# -- an agent graph: an agent used as a tool, a handoff, an approval at the end -------


@function_tool(needs_approval=True)
async def close_ticket(order_id: str) -> str:
    """Close the support ticket (needs approval)."""
    await asyncio.to_thread(post, _url(f"plain/close-{order_id}"), {"order": order_id})
    return f"closed {order_id}"


def research_flow(conv: Conversation) -> Reply:
    order = _order(conv)
    if not conv.called("lookup"):
        return tool_call("lookup", {"order_id": order})
    return f"research: {conv.output_of('lookup')}"


def triage_flow(conv: Conversation) -> Reply:
    order = _order(conv)
    if not conv.called("research"):
        return tool_call("research", {"input": f"order {order}"})
    return tool_call("transfer_to_billing", {})


def billing_flow(conv: Conversation) -> Reply:
    order = _order(conv)
    if not conv.called("close_ticket"):
        return tool_call("close_ticket", {"order_id": order})
    return f"billing closed {order} after {conv.output_of('research')}"


researcher = Agent(
    name="researcher",
    model=ConversationModel(research_flow, on_call=_count_model_call),
    tools=[lookup],
)
billing = Agent(
    name="billing",
    model=ConversationModel(billing_flow, on_call=_count_model_call),
    tools=[close_ticket],
)
triage = Agent(
    name="triage",
    model=ConversationModel(triage_flow, on_call=_count_model_call),
    tools=[researcher.as_tool("research", "Research an order.")],
    handoffs=[billing],
)


# -- objects a worker re-creates from a run's input ----------------------------------


@dataclass
class Ctx:
    """A dataclass context: stored with the run, rebuilt by a worker."""

    user: str


class CountingHooks(RunHooks[Any]):
    """Run hooks, defined at module level so a worker finds them."""

    def __init__(self) -> None:
        self.llm_starts = 0

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        self.llm_starts += 1


counting_hooks = CountingHooks()


@function_tool
def whose(ctx: RunContextWrapper[Ctx]) -> str:
    """Whose request this is."""
    return f"{type(ctx.context).__name__}:{ctx.context.user}"


def context_flow(conv: Conversation) -> Reply:
    if not conv.called("whose"):
        return tool_call("whose")
    if not conv.called("refund"):
        return tool_call("refund", {"order_id": _order(conv), "cents": 1})
    return f"{conv.output_of('whose')} {conv.output_of('refund')}"


context_agent = Agent(
    name="contextual",
    model=ConversationModel(context_flow, on_call=_count_model_call),
    tools=[whose, refund],
)


# -- an input guardrail that asks a screening service before the model runs ----------


async def _screen(ctx: RunContextWrapper[Any], agent: Agent[Any], input: Any) -> Any:
    text = input if isinstance(input, str) else str(input[-1]["content"])
    order = text.split()[-1]
    await asyncio.to_thread(post, _url(f"plain/screen-{order}"), {"order": order})
    return GuardrailFunctionOutput({"screened": order, "verdict": "blocked"}, True)


screen = InputGuardrail(guardrail_function=_screen, name="screen", run_in_parallel=False)
guarded_agent = Agent(
    name="guarded",
    model=ConversationModel(approval_flow, on_call=_count_model_call),
    tools=[lookup],
    input_guardrails=[screen],
)


# -- driving from a test ------------------------------------------------------------


async def _start(argv: list[str]) -> None:
    name, run_id, order = argv[:3]
    agent = globals()[name]
    session = PerdureSession(argv[argv.index("--session") + 1]) if "--session" in argv else None
    backend: Any = await perdure.connect()
    try:
        if "--stream" in argv:
            streamed = DurableRunner.run_streamed(
                agent,
                f"order {order}",
                run_id=run_id,
                session=session,
                backend=backend,
                approvals="durable",
            )
            async for _ in streamed.stream_events():
                pass
        else:
            await DurableRunner.start(
                agent, f"order {order}", run_id=run_id, session=session, backend=backend
            )
        await backend.idle()
    finally:
        await perdure.shutdown()


async def _start_many(argv: list[str]) -> None:
    """``many AGENT:RUN_ID:ORDER[:session=ID] ...``: start several runs in this process."""
    backend: Any = await perdure.connect()
    try:
        for spec in argv:
            name, run_id, order, *rest = spec.split(":")
            session: Any = None
            options = dict(opt.partition("=")[::2] for opt in rest)
            if "sqlite" in options:  # the user's own SQLiteSession, in a file
                session = SQLiteSession(options["session"], options["sqlite"])
            elif "session" in options:
                session = PerdureSession(options["session"])
            await DurableRunner.start(
                globals()[name], f"order {order}", run_id=run_id, session=session, backend=backend
            )
        await backend.idle()
    finally:
        await perdure.shutdown()


async def _sdk_first(argv: list[str]) -> None:
    """``sdk-first RUN_ID ORDER STATE_FILE``: the SDK's approval flow, first half: run
    until the refund needs approval, save the RunState JSON, then wait to be killed."""
    run_id, order, path = argv
    backend: Any = await perdure.connect()
    result = await DurableRunner.run(
        approval_agent, f"order {order}", run_id=run_id, backend=backend
    )
    Path(path).write_text(result.to_state().to_string())
    await asyncio.to_thread(post, _url(f"plain/saved-{order}"), {"run_id": run_id})


async def _sdk_resume(argv: list[str]) -> None:
    """``sdk-resume RUN_ID STATE_FILE``: the second half in another process: load the
    RunState, approve, run it durably."""
    run_id, path = argv
    state = await RunState.from_string(approval_agent, Path(path).read_text())
    for item in state.get_interruptions():
        state.approve(item)
    backend: Any = await perdure.connect()
    try:
        await DurableRunner.start(
            approval_agent, state, run_id=run_id, backend=backend, approvals="sdk"
        )
        await backend.idle()
    finally:
        await perdure.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "many":
        asyncio.run(_start_many(sys.argv[2:]))
    elif sys.argv[1] == "sdk-first":
        asyncio.run(_sdk_first(sys.argv[2:]))
    elif sys.argv[1] == "sdk-resume":
        asyncio.run(_sdk_resume(sys.argv[2:]))
    else:
        asyncio.run(_start(sys.argv[1:]))
