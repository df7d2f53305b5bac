"""Durable operations inside a workflow: steps, effects, signals, sleep, patches.

Outside a run every one of them is transparent: the function is simply called.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, ParamSpec, TypeVar, overload

from perdure._context import StepKind, StepSpec, current_run, current_step_key, recording_run
from perdure._errors import PerdureError
from perdure._retry import DEFAULT_RETRY, RetryPolicy
from perdure._type_registry import register_annotations
from perdure._validation import check_name

P = ParamSpec("P")
R = TypeVar("R")


async def call_plain(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call a sync or async function; sync ones run in a thread so the loop stays free."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def _dispatch(
    spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    ctx = recording_run()
    if ctx is None:
        return await call_plain(fn, args, kwargs)
    return await ctx.step(spec, fn, args, kwargs)


def _decorator(
    kind: StepKind,
    name: str | None,
    retry: RetryPolicy,
    idempotent_receiver: bool,
    compensate: Callable[[Any], Any] | None,
) -> Callable[[Callable[P, Any]], Callable[P, Awaitable[Any]]]:
    def wrap(fn: Callable[P, Any]) -> Callable[P, Awaitable[Any]]:
        step_name = check_name(name or fn.__name__, "step name")
        spec = StepSpec(step_name, kind, retry, idempotent_receiver, compensate)
        register_annotations(fn)  # its result is rebuilt from history on replay

        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            return await _dispatch(spec, fn, args, kwargs)

        wrapper.__perdure_step__ = spec  # type: ignore[attr-defined]
        return wrapper

    return wrap


@overload
def step(fn: Callable[P, Awaitable[R]], /) -> Callable[P, Awaitable[R]]: ...
@overload
def step(fn: Callable[P, R], /) -> Callable[P, Awaitable[R]]: ...
@overload
def step(
    *,
    name: str | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    compensate: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[P, Any]], Callable[P, Awaitable[Any]]]: ...


def step(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    compensate: Callable[[Any], Any] | None = None,
) -> Any:
    """Make a function a recorded step: executed once, replayed from history after.

    Use for work whose result must not be recomputed (a model call, a lookup). Sync
    and async functions both work; the decorated function is awaitable.
    """
    deco = _decorator("step", name, retry, False, compensate)
    return deco(fn) if fn is not None else deco


def effect(
    *,
    idempotent_receiver: bool = False,
    name: str | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    compensate: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[P, Any]], Callable[P, Awaitable[Any]]]:
    """Make a function a side effect: recorded like a step, with intent-before-action.

    ``idempotent_receiver=True``: the receiver dedupes on ``perdure.idempotency_key()``,
    so an unknown outcome is retried with the same key. Otherwise an intent is recorded
    before each call, and a crash between call and record parks the run as
    ``needs-attention`` instead of calling again.
    """
    return _decorator("effect", name, retry, idempotent_receiver, compensate)


async def run_step(name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` as a recorded step called ``name``."""
    return await _dispatch(StepSpec(check_name(name, "step name")), fn, args, kwargs)


def idempotency_key() -> str:
    """A key for the executing step, stable across its retries and process restarts.

    It is ``<run_id>:<step key>``. Outside a run it is a fresh random key, so code
    that passes it on keeps working in tests and scripts.
    """
    ctx = current_run.get()
    key = current_step_key.get()
    if ctx is None:
        return uuid.uuid4().hex
    if key is None:
        raise PerdureError(
            "perdure.idempotency_key() is available inside a step or effect, "
            f"not in the workflow body of run {ctx.run_id!r}"
        )
    return ctx.idempotency_key()


async def wait_for_signal(
    name: str, *, timeout: float | None = None, details: dict[str, Any] | None = None
) -> Any:
    """Wait durably for the signal ``name`` and return its payload.

    The process may exit meanwhile; the run resumes wherever a worker runs once the
    signal is delivered (``perdure.signal``). Raises ``SignalTimeoutError`` after
    ``timeout`` seconds. ``details`` (JSON data saying what is pending) is shown on the
    suspended run by ``perdure runs list`` and ``get_run(...).attention``.
    """
    check_name(name, "signal name")
    ctx = current_run.get()
    if ctx is None:
        raise PerdureError(f"wait_for_signal({name!r}) needs a durable run")
    return await ctx.wait_for_signal(name, timeout, details)


async def sleep(seconds: float) -> None:
    """Sleep durably: no thread, connection or memory is held while the run waits."""
    ctx = current_run.get()
    if ctx is None:
        await asyncio.sleep(seconds)
        return
    await ctx.sleep(seconds)


def patched(marker: str) -> bool:
    """True for runs that reach this point running code with the patch ``marker``.

    Runs recorded before the patch replay the old path (False), new ones take the new.
    """
    ctx = current_run.get()
    return True if ctx is None else ctx.patched(marker)


def keyed(key: str) -> AbstractContextManager[None]:
    """Journal the steps inside this block under ``key`` (plus their order within it)
    rather than under their position in the run.

    For code a framework may re-enter from the middle: a LangGraph node re-run after a
    crash or an ``interrupt()`` skips earlier supersteps, so positions would shift, but
    ``thread/checkpoint/task`` keys do not. Outside a run it does nothing.
    """
    ctx = current_run.get()
    return contextlib.nullcontext() if ctx is None else ctx.keyed(key)


def current_run_id() -> str | None:
    """The id of the run executing in this task, or None outside a run."""
    ctx = current_run.get()
    return None if ctx is None else ctx.run_id
