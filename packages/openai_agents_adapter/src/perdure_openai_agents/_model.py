"""Every model call is a step: ``DurableModel`` records the response and replays it.

The real model is created lazily, so a replay needs no client and no API key.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model, ModelProvider
from openai.types.responses import ResponseCompletedEvent

import perdure
from perdure.spi import (
    NO_RETRY,
    RetryPolicy,
    StepSpec,
    current_run,
    current_step_key,
    recording_run,
    report_determinism,
)
from perdure_openai_agents._codec import (
    dump_model_response,
    load_model_response,
    model_record,
    model_response_from_stream,
    response_for_stream,
)
from perdure_openai_agents._errors import raise_step_failure

#: By default a model call is one attempt: the SDK (``ModelSettings.retry``) and the
#: OpenAI client already retry, and stacking perdure's retries on theirs would bill more
#: calls than plain ``Runner``. ``DurableRunner.run(..., model_retry=RetryPolicy(...))``
#: opts in; the attempts are recorded in the run's history.
MODEL_RETRY = NO_RETRY


def _non_retryable() -> tuple[type[BaseException], ...]:
    import openai
    from agents.exceptions import AgentsException

    return (
        AgentsException,
        openai.BadRequestError,
        openai.AuthenticationError,
        openai.PermissionDeniedError,
        openai.NotFoundError,
        openai.UnprocessableEntityError,
        NotImplementedError,
        TypeError,
        ValueError,
    )


def model_spec(retry: RetryPolicy | None = None) -> StepSpec:
    """The step spec of one model call."""
    policy = retry or MODEL_RETRY
    if policy.max_attempts > 1 and not policy.non_retryable:
        policy = dataclasses.replace(policy, non_retryable=_non_retryable())
    return StepSpec("model", "step", policy)


def _offered(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Names of the tools and handoffs offered to the model, for the determinism check."""
    tools = kwargs.get("tools", args[3] if len(args) > 3 else None) or []
    handoffs = kwargs.get("handoffs", args[5] if len(args) > 5 else None) or []
    names = [str(getattr(t, "name", type(t).__name__)) for t in tools]
    names += [f"handoff:{getattr(h, 'tool_name', '?')}" for h in handoffs]
    return sorted(names)


def _replayed(record: Any, offered: list[str]) -> tuple[dict[str, Any], str]:
    """The stored response of a recorded model call and where it is recorded, once the
    tools it was offered are checked against those offered now."""
    ctx = current_run.get()
    run_id = ctx.run_id if ctx is not None else "?"
    response, recorded, key = model_record(record, f"recorded model call of run {run_id!r}")
    where = f"recorded model response {key!r} of run {run_id!r}"
    if recorded is None or recorded == offered:
        return response, where
    added = sorted(set(offered) - set(recorded))
    removed = sorted(set(recorded) - set(offered))
    raise determinism_error(
        perdure.DeterminismError(
            run_id,
            key,
            f"the model call recorded at {key!r} was offered tools {recorded} but the agent "
            f"now offers {offered} (added {added}, removed {removed}); the agent changed "
            "under an in-flight run",
        )
    )


def determinism_error(exc: perdure.DeterminismError) -> perdure.DeterminismError:
    """Report a mismatch found by the adapter to the run, so that the drive stops and
    parks the run (as the engine does for its own checks), then return it to raise."""
    return report_determinism(exc)


class DurableModel(Model):
    """Wraps a ``Model``: each call is a recorded step, replayed without calling it."""

    def __init__(self, make_inner: Callable[[], Model], *, retry: RetryPolicy | None = None):
        self._make_inner = make_inner
        self._inner: Model | None = None
        self._spec = model_spec(retry)

    @classmethod
    def wrapping(cls, model: Model, *, retry: RetryPolicy | None = None) -> DurableModel:
        """A durable wrapper around an existing model instance."""
        if isinstance(model, DurableModel):
            return model
        return cls(lambda: model, retry=retry)

    @property
    def inner(self) -> Model:
        """The real model, created on first live use."""
        if self._inner is None:
            self._inner = self._make_inner()
        return self._inner

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        ctx = recording_run()
        if ctx is None:
            return await self.inner.get_response(*args, **kwargs)
        offered = _offered(args, kwargs)

        live: list[ModelResponse] = []

        async def call() -> dict[str, Any]:
            response = await self.inner.get_response(*args, **kwargs)
            live.append(response)
            return {
                "response": dump_model_response(response),
                "offered": offered,
                "key": current_step_key.get(),
            }

        with raise_step_failure():
            record: dict[str, Any] = await ctx.step(self._spec, call, (), {})
        if live:  # called now: the SDK gets the model's own response object
            return live[0]
        response, where = _replayed(record, offered)
        return load_model_response(response, where)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:  # type: ignore[override]
        return self._stream(args, kwargs)

    async def _stream(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> AsyncIterator[TResponseStreamEvent]:
        ctx = recording_run()
        if ctx is None:
            async for event in self.inner.stream_response(*args, **kwargs):
                yield event
            return
        offered = _offered(args, kwargs)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()

        live: list[Any] = []

        async def call() -> dict[str, Any]:
            completed = None
            items: list[Any] = []
            async for event in self.inner.stream_response(*args, **kwargs):
                kind = getattr(event, "type", None)
                if kind == "response.completed":
                    completed = event.response  # type: ignore[union-attr]
                    live.append(event)
                    continue  # handed on once recorded
                if kind == "response.output_item.done":
                    items.append(event.item)  # type: ignore[union-attr]
                queue.put_nowait(event)
            if completed is None:
                raise RuntimeError("the model stream ended without response.completed")
            return {
                "response": model_response_from_stream(completed, items),
                "offered": offered,
                "key": current_step_key.get(),
            }

        # The step runs in its own task so that events flow to the runner while it runs;
        # its position is that task's, the same on every replay.
        step = asyncio.ensure_future(ctx.step(self._spec, call, (), {}))
        step.add_done_callback(lambda _: queue.put_nowait(done))
        try:
            while True:
                event = await queue.get()
                if event is done:
                    break
                yield event
            with raise_step_failure():
                record: dict[str, Any] = step.result()
        finally:
            if not step.done():
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step
        if live:
            yield live[0]  # called now: the model's own terminal event
            return
        response, where = _replayed(record, offered)
        yield ResponseCompletedEvent(
            type="response.completed",
            response=response_for_stream(response, where),
            sequence_number=0,
        )

    def get_retry_advice(self, request: Any) -> Any:
        if self._inner is None:
            return None
        return self._inner.get_retry_advice(request)

    def _supports_default_prompt_cache_key(self) -> bool:
        try:
            probe = getattr(self.inner, "_supports_default_prompt_cache_key", None)
        except Exception:  # no credentials on a replay: no cache key, no matter
            return False
        return bool(probe()) if callable(probe) else False

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        if self._inner is not None:
            cleanup = getattr(self._inner, "_cleanup_on_run_end", None)
            if cleanup is not None:
                await cleanup(owner)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or self.__dict__.get("_inner") is None:
            raise AttributeError(name)
        return getattr(self.__dict__["_inner"], name)


class DurableProvider(ModelProvider):
    """Wraps a ``ModelProvider`` so each model it returns records its calls."""

    def __init__(
        self, inner: ModelProvider, *, owned: bool = False, retry: RetryPolicy | None = None
    ) -> None:
        self.inner = inner
        self.owned = owned
        self._retry = retry

    def get_model(self, model_name: str | None) -> Model:
        return DurableModel(lambda: self.inner.get_model(model_name), retry=self._retry)

    async def aclose(self) -> None:
        if self.owned:
            await self.inner.aclose()
