"""A user's session in a durable run: its operations are recorded steps, and the
journaling reads the session no more often than ``Runner`` does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, Runner
from agents.memory.session import SessionABC
from agents.testing import ScriptedModel, assistant_message

import perdure
from perdure import EventKind
from perdure_openai_agents import DurableRunner


@pytest.fixture(autouse=True)
def no_api_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


@pytest.fixture(autouse=True)
async def closed_backends() -> Any:
    yield
    await perdure.shutdown()


class CountingSession(SessionABC):
    def __init__(self) -> None:
        self.session_id = "counting"
        self.session_settings = None
        self.items: list[Any] = []
        self.reads = 0

    async def get_items(self, limit: int | None = None) -> list[Any]:
        self.reads += 1
        return list(self.items if limit is None else self.items[-limit:])

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


def _agent() -> Agent[Any]:
    return Agent(name="chat", model=ScriptedModel([[assistant_message("hi")]]))


async def test_a_durable_run_reads_the_session_as_often_as_runner(perdure_backend: Any) -> None:
    plain = CountingSession()
    await Runner.run(_agent(), "hello", session=plain)
    durable = CountingSession()
    result = await DurableRunner.run(_agent(), "hello", session=durable, backend=perdure_backend)
    assert durable.reads == plain.reads
    assert durable.items == plain.items
    history = await perdure_backend.history(result.run_id)
    names = [e.step_key.split(":", 1)[1] for e in history if e.kind is EventKind.STEP_COMPLETED]
    assert names.count("session:add_items") == 2  # the input, then the answer
    assert names.count("session:length") == 2  # recorded from the tracked length


async def test_a_method_set_on_the_session_object_is_journaled(perdure_backend: Any) -> None:
    session = CountingSession()
    calls: list[str] = []
    original = session.get_items

    async def get_items(limit: int | None = None) -> list[Any]:
        calls.append("instance")
        return await original(limit)

    session.get_items = get_items  # type: ignore[method-assign]
    result = await DurableRunner.run(_agent(), "hello", session=session, backend=perdure_backend)
    assert calls == ["instance"]  # the SDK's one read, through the user's own method
    history = await perdure_backend.history(result.run_id)
    keys = [e.step_key or "" for e in history if e.kind is EventKind.STEP_COMPLETED]
    assert any(k.endswith(":session:get_items") for k in keys)
