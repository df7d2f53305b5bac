"""pytest plugin for the Agents SDK's own test suite: every ``Runner.run`` /
``run_streamed`` / ``run_sync`` a test makes goes to ``DurableRunner`` on a fresh SQLite
file (one per test). Calls the SDK itself makes (an agent used as a tool runs its
nested agent with ``Runner``) are left to ``Runner``, inside a durable run or not: they
are no calls of the tests, and in an application they are ``Runner`` calls too.

Loaded by ``nox -s agents_suite`` with ``-p perdure_openai_agents.suite_route``; it writes
the ids of the tests that reached ``DurableRunner`` to ``$PERDURE_SUITE_REACHED``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Runner

from perdure_openai_agents import DurableRunner, in_durable_run

_RUN = Runner.__dict__["run"].__func__
_RUN_SYNC = Runner.__dict__["run_sync"].__func__
_RUN_STREAMED = Runner.__dict__["run_streamed"].__func__
_REACHED: set[str] = set()


def _plain() -> bool:
    """True when the call is the SDK's own (or DurableRunner's), not the test's."""
    if in_durable_run():
        return True
    frame = sys._getframe(2)  # pyright: ignore[reportPrivateUsage]  # above the route
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module == "agents" or module.startswith("agents."):
            return True
        frame = frame.f_back
    return False


@pytest.fixture(autouse=True)
def _durable_runner(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    url = f"sqlite:///{tmp_path / f'perdure-{uuid.uuid4().hex[:8]}.db'}"
    node = request.node.nodeid

    async def run(cls: Any, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        if _plain():
            return await _RUN(cls, starting_agent, input, **kwargs)
        _REACHED.add(node)
        return await DurableRunner.run(starting_agent, input, url=url, **kwargs)

    def run_sync(cls: Any, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        if _plain():
            return _RUN_SYNC(cls, starting_agent, input, **kwargs)
        _REACHED.add(node)
        return DurableRunner.run_sync(starting_agent, input, url=url, **kwargs)

    def run_streamed(cls: Any, starting_agent: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        if _plain():
            return _RUN_STREAMED(cls, starting_agent, input, *args, **kwargs)
        _REACHED.add(node)
        return DurableRunner.run_streamed(starting_agent, input, *args, url=url, **kwargs)

    monkeypatch.setattr(Runner, "run", classmethod(run))
    monkeypatch.setattr(Runner, "run_sync", classmethod(run_sync))
    monkeypatch.setattr(Runner, "run_streamed", classmethod(run_streamed))
    yield  # perdure.connect drops the backends of this test's loop once it is closed


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("PERDURE_SUITE_REACHED")
    if out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(f"{out}.{worker}").write_text("\n".join(sorted(_REACHED)))
