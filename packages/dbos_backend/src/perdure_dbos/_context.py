"""``DbosRunContext``: perdure's durable operations as DBOS steps, recv, sleep and events.

Every DBOS step of a run is named by its perdure step key (``<position>:<name>``), so
DBOS's own replay check (the recorded function name per step id) is perdure's
determinism check. Step outputs are small JSON envelopes (``{"t": ...}``) from which
``history`` rebuilds perdure events.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, cast

from dbos import DBOS
from dbos import error as dbos_errors

from perdure.context import StepSpec, current_step_key
from perdure.errors import (
    CorruptHistoryError,
    DeterminismError,
    OutcomeUnknownError,
    SerializationError,
    SignalTimeoutError,
    StepFailedError,
)
from perdure.positions import KEYED_PREFIX, Compensation, Positions
from perdure.semantics import approvals
from perdure.serialization import from_jsonable, to_jsonable
from perdure.steps import call_plain
from perdure_dbos._serializer import CorruptValueError
from perdure_dbos._tables import Marks

#: A wait with no timeout: DBOS's recv needs a finite one.
FOREVER = 10 * 365 * 24 * 3600.0
RECONCILE_TOPIC = "__perdure_reconcile__"
CANCEL_KEY = "__perdure_cancel__"
#: Seconds between two reads of the cancel flag while steps execute back to back.
CANCEL_CHECK = 0.25

#: Contexts of the runs this process is driving now, for ``idle`` and ``wait``.
LIVE: dict[str, DbosRunContext] = {}
_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()


def notify() -> None:
    """Wake every ``changed()`` waiter: a run of this process changed state."""
    for loop, event in list(_waiters):
        with contextlib.suppress(RuntimeError):  # that loop is closed
            loop.call_soon_threadsafe(event.set)


async def wait_until(done: Callable[[], bool]) -> None:
    """Return once ``done()`` holds, re-checking whenever a run of this process changes."""
    entry = (asyncio.get_running_loop(), asyncio.Event())
    _waiters.add(entry)
    try:
        while not done():
            await entry[1].wait()
            entry[1].clear()
    finally:
        _waiters.discard(entry)


class Cancelled(BaseException):
    """Unwinds the workflow when the run was cancelled; compensation follows."""


def error_info(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


class DbosRunContext:
    """The ``RunContext`` of one execution of one run inside the ``perdure_run`` workflow."""

    def __init__(self, run_id: str, marks: Marks, url: str) -> None:
        self._run_id = run_id
        self._url = url
        self.marks = marks
        self.positions = Positions()
        self.compensations: list[Compensation] = []
        self.cancelling = False
        self.broken: DeterminismError | CorruptHistoryError | None = None
        self._state = "running"
        #: The topic of the message the run waits for (state waiting or parked).
        self.waiting_on: str | None = None
        self.task: asyncio.Task[Any] | None = None
        self._cancel = False
        self._checked_at = -CANCEL_CHECK

    @property
    def state(self) -> str:
        """running | waiting (recv/sleep) | parked | done; read by ``idle``."""
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value
        notify()

    def enter(self) -> None:
        self.task = asyncio.current_task()
        self.positions.enter()

    def woken(self, topic: str) -> None:
        """A message on ``topic`` was just sent to this run: if it waits for it, it is
        running again from now (so ``idle`` does not return before it takes it)."""
        if self._state in ("waiting", "parked") and self.waiting_on == topic:
            self.waiting_on = None
            self.state = "running"

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def url(self) -> str:
        return self._url

    def fail_determinism(self, error: DeterminismError) -> DeterminismError:
        failed = self._fail(error)
        return failed if isinstance(failed, DeterminismError) else error

    def keyed(self, key: str) -> AbstractContextManager[None]:
        """Steps inside are journaled by ``key`` in perdure's own table, not by DBOS step
        id: a framework may re-enter this code with earlier steps skipped."""
        return self.positions.keyed(key)

    # -- positions and DBOS calls ----------------------------------------------------

    def _position(self) -> str:
        if self.broken is not None:
            raise self.broken
        return self.positions.next()

    def _fail(
        self, exc: DeterminismError | CorruptHistoryError
    ) -> DeterminismError | CorruptHistoryError:
        if self.broken is None:
            self.broken = exc
        return self.broken

    async def _dbos(self, key: str, call: Awaitable[Any]) -> Any:
        """Await a DBOS operation at ``key``; a recorded name mismatch is a determinism error."""
        try:
            return await call
        except CorruptValueError as exc:
            raise self._fail(
                CorruptHistoryError(self.run_id, None, f"step {key!r}: {exc}")
            ) from None
        except dbos_errors.DBOSUnexpectedStepError as exc:
            _, _, expected, recorded = exc.inputs
            raise self._fail(
                DeterminismError(
                    self.run_id,
                    str(expected if expected else key),
                    f"the code asks for {expected!r} where the history recorded {recorded!r}; "
                    "the code changed under an in-flight run",
                )
            ) from None

    async def _record(self, key: str, fn: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
        """Run ``fn`` as the DBOS step ``key`` (or replay its recorded envelope)."""
        out = await self._dbos(key, DBOS.run_step_async({"name": key}, fn))
        return cast(dict[str, Any], out)

    async def _cancel_requested(self, *, fresh: bool = False) -> bool:
        """Whether cancellation was requested; read at most every ``CANCEL_CHECK`` seconds
        between steps (the answer is recorded in the step's envelope, so replay agrees)."""
        if self.cancelling:
            return False
        now = time.monotonic()
        if fresh or now - self._checked_at >= CANCEL_CHECK:
            mark = await asyncio.to_thread(self.marks.get, self.run_id)
            self._cancel = mark is not None and mark.cancel_requested
            self._checked_at = now
        return self._cancel

    async def _recorded_ahead(self) -> bool:
        """Whether DBOS recorded the next operation of this run (the ``recv`` after a
        wait): replay of a wait whose message was already taken, so nothing shows the
        run as waiting again."""
        from dbos._context import get_local_dbos_context

        from perdure_dbos._backend import recorded_at

        dbos_ctx = get_local_dbos_context()
        if dbos_ctx is None:
            return False
        return await asyncio.to_thread(recorded_at, self.run_id, dbos_ctx.function_id + 1)

    async def _set(self, **values: Any) -> None:
        await asyncio.to_thread(self.marks.update, self.run_id, **values)

    # -- RunContext ------------------------------------------------------------------

    def idempotency_key(self) -> str:
        return f"{self.run_id}:{current_step_key.get()}"

    def patched(self, marker: str) -> bool:
        return bool(DBOS.patch(marker))

    async def step(
        self, spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        key = f"{self._position()}:{spec.name}"
        if key.startswith(KEYED_PREFIX):
            return await self._keyed_step(key, spec, fn, args, kwargs)
        non_idempotent = spec.kind == "effect" and not spec.idempotent_receiver
        attempt = 1
        while True:
            fresh_intent = False
            if non_idempotent:

                async def intent(n: int = attempt) -> dict[str, Any]:
                    nonlocal fresh_intent
                    if await self._cancel_requested():
                        return {"t": "cancelled"}
                    fresh_intent = True
                    return {"t": "intent", "name": spec.name, "attempt": n, "at": time.time()}

                env: dict[str, Any] = await self._record(key, intent)
                if env.get("t") == "cancelled":
                    raise Cancelled()

            async def call(n: int = attempt, intent_fresh: bool = fresh_intent) -> dict[str, Any]:
                if non_idempotent and not intent_fresh:
                    return {"t": "unknown", "name": spec.name}
                if not non_idempotent and await self._cancel_requested():
                    return {"t": "cancelled"}
                return await self._execute(key, spec, fn, args, kwargs, n)

            env = await self._record(key, call)
            kind = env.get("t")
            if kind == "ok":
                return self._ok(key, spec, env)
            if kind == "cancelled":
                raise Cancelled()
            if kind == "unknown":
                outcome = await self._park(key, spec, args, kwargs, env.get("message"))
                if outcome is None:
                    attempt += 1
                    continue
                return outcome
            self._raise_if_final(key, env, attempt)
            await self._dbos(key, DBOS.sleep_async(float(env.get("retry_in") or 0)))
            attempt += 1

    async def _keyed_step(
        self,
        key: str,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """A step inside ``keyed``: recorded in ``perdure_keyed_steps`` by its key."""
        marks = self.marks
        env = await asyncio.to_thread(marks.get_keyed, self.run_id, key)
        non_idempotent = spec.kind == "effect" and not spec.idempotent_receiver
        attempt = int(env.get("attempt", 0)) + 1 if env and env.get("t") == "error" else 1
        while True:
            if env is not None and env.get("t") == "intent":
                outcome = await self._park(key, spec, args, kwargs, None)
                if outcome is not None:
                    done = {"t": "ok", "name": spec.name, "kind": spec.kind, "attempt": attempt}
                    done["result"] = to_jsonable(outcome, f"result of step {key!r}")
                    await asyncio.to_thread(marks.put_keyed, self.run_id, key, done)
                    return outcome
                env = None
            if env is None or (env.get("t") == "error" and not env.get("final")):
                if await self._cancel_requested():
                    raise Cancelled()
                if non_idempotent:
                    intent = {"t": "intent", "name": spec.name, "attempt": attempt}
                    await asyncio.to_thread(marks.put_keyed, self.run_id, key, intent)
                env = await self._execute(key, spec, fn, args, kwargs, attempt)
                if env.get("t") == "unknown":
                    env = {"t": "intent", "name": spec.name, "attempt": attempt}
                    continue
                await asyncio.to_thread(marks.put_keyed, self.run_id, key, env)
            kind = env.get("t")
            if kind == "ok":
                return self._ok(key, spec, env)
            self._raise_if_final(key, env, attempt)
            await asyncio.sleep(float(env.get("retry_in") or 0))
            attempt += 1

    def _ok(self, key: str, spec: StepSpec, env: dict[str, Any]) -> Any:
        """The result a recorded ``ok`` envelope holds (its compensation noted)."""
        result = from_jsonable(env.get("result"), f"run {self.run_id!r} step {key!r}")
        if spec.compensate is not None:
            self.compensations.append(Compensation(key, spec.compensate, result))
        return result

    @staticmethod
    def _raise_if_final(key: str, env: dict[str, Any], attempt: int) -> None:
        """A recorded error envelope that allows no more attempts fails the step."""
        if env.get("final"):
            error: dict[str, Any] = env.get("error") or {}
            raise StepFailedError(
                key,
                int(env.get("attempt", attempt)),
                str(error.get("type", "Error")),
                str(error.get("message", "")),
            )

    async def _execute(
        self,
        key: str,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        attempt: int,
    ) -> dict[str, Any]:
        """Call the user's function once; its outcome as an envelope (never raises)."""
        non_idempotent = spec.kind == "effect" and not spec.idempotent_receiver
        token = current_step_key.set(key)
        started = time.time()
        base = {"name": spec.name, "kind": spec.kind, "attempt": attempt}
        try:
            result = await call_plain(fn, args, kwargs)
        except Exception as exc:
            if isinstance(exc, OutcomeUnknownError) and non_idempotent:
                return {"t": "unknown", "name": spec.name, "message": str(exc)}
            retryable = spec.retry.should_retry(exc, attempt) or (
                isinstance(exc, OutcomeUnknownError) and attempt < spec.retry.max_attempts
            )
            env = {**base, "t": "error", "error": error_info(exc), "final": not retryable}
            if retryable:
                env["retry_in"] = spec.retry.delay(attempt)
            return env
        finally:
            current_step_key.reset(token)
        try:
            encoded = to_jsonable(result, f"result of step {key!r}")
        except SerializationError as exc:
            return {**base, "t": "error", "error": error_info(exc), "final": True}
        return {**base, "t": "ok", "result": encoded, "duration": round(time.time() - started, 6)}

    async def _park(
        self,
        key: str,
        spec: StepSpec,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        reason: str | None,
    ) -> Any:
        """Park as needs-attention until ``reconcile``; return the reconciled result, or
        None to try the effect again."""
        try:
            shown_args: Any = to_jsonable({"args": list(args), "kwargs": kwargs})
        except SerializationError:
            shown_args = repr((args, kwargs))
        attention = {
            "reason": "unknown-outcome",
            "step_key": key,
            "name": spec.name,
            "arguments": shown_args,
            "intent_at": time.time(),
            "message": reason
            or "the process died after recording the intent and before "
            "recording the outcome; the receiver may or may not have acted",
        }

        fresh = False

        async def park() -> dict[str, Any]:
            nonlocal fresh
            fresh = True
            return {"t": "park", "attention": attention}

        env = await self._record(key, park)
        replaying = not fresh and await self._recorded_ahead()
        if not replaying:
            await self._set(attention=env.get("attention"))
            self.waiting_on = f"{RECONCILE_TOPIC}{key}"
            self.state = "parked"
        decision = await self._dbos(key, DBOS.recv_async(f"{RECONCILE_TOPIC}{key}", FOREVER))
        if not replaying:
            self.state = "running"
            await self._set(attention=None)
        data: dict[str, Any] = decision or {}
        if data.get(CANCEL_KEY):
            raise Cancelled()
        outcome = data.get("outcome")
        if outcome == "succeeded":
            result = from_jsonable(data.get("result"), f"reconciled result of step {key!r}")
            if spec.compensate is not None:
                self.compensations.append(Compensation(key, spec.compensate, result))
            return result
        if outcome == "failed":
            raise StepFailedError(key, 1, "Reconciled", str(data.get("message") or "marked failed"))
        return None

    async def wait_for_signal(
        self, name: str, timeout: float | None, details: dict[str, Any] | None = None
    ) -> Any:
        key = f"{self._position()}:signal:{name}"
        shown = to_jsonable(details, f"details of wait {key!r}") if details else None
        # An approval waits on its own request's topic (``perdure.semantics.approvals``).
        topic = (
            approvals.channel(approvals.request_id(self.run_id, key))
            if name == approvals.APPROVAL
            else name
        )

        fresh = False

        async def wait() -> dict[str, Any]:
            nonlocal fresh
            fresh = True
            if await self._cancel_requested(fresh=True):
                return {"t": "cancelled"}
            deadline = None if timeout is None else time.time() + timeout
            return {"t": "wait", "name": name, "deadline": deadline, "details": shown}

        env = await self._record(key, wait)
        if env.get("t") == "cancelled":
            raise Cancelled()
        if not fresh and await self._recorded_ahead():
            # Replay: the message was taken already; the run never shows as waiting (a
            # previous execution may have died before clearing its wait).
            await self._set(waiting_for=None, wake_at=None, details=None)
            message = await self._dbos(
                key, DBOS.recv_async(topic, FOREVER if timeout is None else timeout)
            )
            if message is None:
                raise SignalTimeoutError(name, float(timeout or 0))
            data: dict[str, Any] = message
            if data.get(CANCEL_KEY):
                raise Cancelled()
            return from_jsonable(data.get("payload"), f"run {self.run_id!r} signal {key!r}")
        from perdure_dbos._backend import inbox

        if await asyncio.to_thread(
            self.marks.suspend,
            self.run_id,
            topic,
            wake_at=env.get("deadline"),
            details=shown,
            inbox=inbox(),
        ):
            self.waiting_on = topic
            self.state = "waiting"  # a signal sent before the wait is taken without stopping
        if not self.cancelling and await self._cancel_requested(fresh=True):
            # Cancelled between the check above and our waiting_for write: make sure the
            # recv below sees it (``cancel`` may have found us not waiting yet).
            from perdure_dbos._backend import send_cancel

            await asyncio.to_thread(send_cancel, self.run_id, topic)
        message = await self._dbos(
            key, DBOS.recv_async(topic, FOREVER if timeout is None else timeout)
        )
        self.state = "running"
        await self._set(waiting_for=None, wake_at=None, details=None)
        if message is None:
            raise SignalTimeoutError(name, float(timeout or 0))
        data = message
        if data.get(CANCEL_KEY):
            raise Cancelled()
        await self._verify_history()
        return from_jsonable(data.get("payload"), f"run {self.run_id!r} signal {key!r}")

    async def _verify_history(self) -> None:
        """After a suspension, re-read the recorded steps before continuing (as a replay
        would): a row corrupted meanwhile parks the run instead of being built upon."""
        from perdure_dbos._backend import check_steps

        try:
            await asyncio.to_thread(check_steps, self.run_id)
        except CorruptHistoryError as exc:
            raise self._fail(exc) from None

    async def sleep(self, seconds: float) -> None:
        key = f"{self._position()}:sleep"

        async def timer() -> dict[str, Any]:
            if await self._cancel_requested():
                return {"t": "cancelled"}
            return {"t": "timer", "seconds": seconds, "wake_at": time.time() + seconds}

        env = await self._record(key, timer)
        if env.get("t") == "cancelled":
            raise Cancelled()
        wake_at = float(env.get("wake_at") or 0)
        if wake_at > time.time():
            await self._set(wake_at=wake_at)
            self.state = "waiting"
        await self._dbos(key, DBOS.sleep_async(seconds))
        self.state = "running"
        await self._set(wake_at=None)

    async def compensate(self) -> list[str]:
        """Compensate completed steps, newest first, each as a recorded step."""
        self.cancelling = True
        done: list[str] = []
        for comp in reversed(self.compensations):
            spec = StepSpec(f"compensate:{comp.key.partition(':')[2]}")
            await self.step(spec, comp.fn, (comp.result,), {})
            done.append(comp.key)
        return done
