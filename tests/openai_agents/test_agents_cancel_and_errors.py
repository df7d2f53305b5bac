"""DurableRunner behaves like Runner when its caller is cancelled and when the run's own
code raises: the drive in this process stops (and the run stays resumable), and the
exception the caller gets is the one the code raised, with its own ``__context__``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.memory.session import SessionABC
from agents.testing import ScriptedModel, assistant_message, function_call

import perdure
from perdure import RunStatus
from perdure_openai_agents import DurableRunner


@pytest.fixture(autouse=True)
def no_api_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


@pytest.fixture(autouse=True)
async def closed_backends() -> Any:
    yield
    await perdure.shutdown()


class ListSession(SessionABC):
    """A user's own session, in memory; ``fail`` decides what a write raises."""

    def __init__(self, fail: Any = None) -> None:
        self.session_id = "list"
        self.session_settings = None
        self.items: list[Any] = []
        self.fail = fail

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[-limit:])

    async def add_items(self, items: list[Any]) -> None:
        if self.fail is not None and any(i.get("type") == "message" for i in items):
            self.fail()
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


async def test_cancelling_the_caller_cancels_the_drive_and_the_run_stays_resumable(
    perdure_backend: Any,
) -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    @function_tool
    async def wait_forever() -> str:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    agent = Agent(
        name="blocked",
        model=ScriptedModel([[function_call("wait_forever", {}, call_id="c1")]]),
        tools=[wait_forever],
    )
    caller = asyncio.create_task(
        DurableRunner.run(agent, "go", backend=perdure_backend, run_id="r-cancelled")
    )
    await entered.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert cancelled.is_set()  # the tool saw the cancellation, as under Runner.run
    info = await perdure_backend.get_run("r-cancelled")
    # Not failed nor cancelled as a perdure run: a worker (or handle.cancel()) decides.
    assert info.status in (RunStatus.PENDING, RunStatus.RUNNING)


async def test_a_cancelled_error_raised_by_a_session_reaches_the_caller_as_itself(
    perdure_backend: Any,
) -> None:
    def cancel() -> None:
        raise asyncio.CancelledError("session save cancelled")

    session = ListSession(fail=cancel)
    agent = Agent(name="saver", model=ScriptedModel([[assistant_message("hi")]]))
    with pytest.raises(asyncio.CancelledError, match="session save cancelled"):
        await DurableRunner.run(agent, "hello", session=session, backend=perdure_backend)
    assert [i.get("role") for i in session.items] == ["user"]


async def test_an_error_of_the_runs_code_keeps_its_own_context(perdure_backend: Any) -> None:
    def fail() -> None:
        try:
            raise RuntimeError("first failure")
        except RuntimeError:
            raise LookupError("session save failed") from None

    agent = Agent(name="saver", model=ScriptedModel([[assistant_message("hi")]]))
    with pytest.raises(LookupError, match="session save failed") as raised:
        await DurableRunner.run(
            agent, "hello", session=ListSession(fail=fail), backend=perdure_backend
        )
    context = raised.value.__context__
    assert isinstance(context, RuntimeError) and str(context) == "first failure"
    assert raised.value.__suppress_context__
