"""Step positions of a run, shared by every backend that replays by position.

Steps in the workflow's own task are numbered ``1, 2, 3...``; a task the workflow
spawns (``asyncio.gather``, ``create_task``) takes the next number of its parent as a
prefix at its first step and numbers its own below it (``4.1, 4.2``), so replay meets
the same positions whatever order the tasks finish in. Inside ``keyed(key)`` steps are
numbered under the framework's key instead (``~key/1``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["KEYED_PREFIX", "Compensation", "Positions"]

#: Positions under a framework's key start with this; a replay need not reach them.
KEYED_PREFIX = "~"


@dataclass(slots=True)
class _Scope:
    prefix: str
    task: asyncio.Task[Any] | None
    counter: int = 0

    def next(self) -> str:
        self.counter += 1
        return f"{self.prefix}{self.counter}"


_scope: ContextVar[_Scope | None] = ContextVar("perdure_scope", default=None)


class Positions:
    """The position counter of one drive of one run."""

    def __init__(self) -> None:
        self._root = _Scope("", None)

    def enter(self) -> None:
        """Bind the root scope to the task about to run the workflow."""
        self._root.task = asyncio.current_task()
        _scope.set(self._root)

    def _current(self) -> _Scope:
        scope = _scope.get() or self._root
        task = asyncio.current_task()
        if scope.task is not task:
            # First step of a task spawned by the workflow: it takes the next position
            # of its parent and numbers its own steps below it.
            scope = _Scope(f"{scope.next()}.", task)
            _scope.set(scope)
        return scope

    def next(self) -> str:
        """The position of the step being asked for now."""
        return self._current().next()

    def peek(self) -> str:
        """The position ``next()`` would return, without taking it."""
        scope = _scope.get() or self._root
        return f"{scope.prefix}{scope.counter + 1}"

    @contextlib.contextmanager
    def keyed(self, key: str) -> Generator[None]:
        """Number the steps inside under ``key`` (``:`` is reserved for step keys)."""
        token = _scope.set(
            _Scope(f"{KEYED_PREFIX}{key.replace(':', '|')}/", asyncio.current_task())
        )
        try:
            yield
        finally:
            _scope.reset(token)


@dataclass(slots=True)
class Compensation:
    """A completed step's undo, run with its result if the run is cancelled."""

    key: str
    fn: Callable[[Any], Any]
    result: Any
