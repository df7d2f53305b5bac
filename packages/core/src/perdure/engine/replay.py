"""The run context of the embedded engine: replays recorded steps, executes the rest."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perdure.context import StepSpec, current_step_key
from perdure.engine.outages import Drained
from perdure.errors import (
    CorruptHistoryError,
    DeterminismError,
    LeaseLostError,
    OutcomeUnknownError,
    SerializationError,
    SignalTimeoutError,
    StepFailedError,
)
from perdure.positions import KEYED_PREFIX, Compensation, Positions
from perdure.records import POSITIONAL_KINDS, Event, EventKind, NewEvent, RunStatus
from perdure.serialization import from_jsonable, to_jsonable
from perdure.steps import call_plain
from perdure.store import RunUpdate

if TYPE_CHECKING:
    from perdure.engine.driver import RunDriver


class Interrupt(BaseException):
    """Unwinds the workflow when the drive stops without finishing.

    A BaseException so that ``except Exception`` in user code cannot swallow it.
    """

    def __init__(self, update: RunUpdate, events: list[NewEvent]) -> None:
        super().__init__(update.status.value)
        self.update = update
        self.events = events


class ReplayEnd(BaseException):
    """A replay-only drive reached work its history does not record: it stops there,
    before running anything (see ``perdure.engine.replay_check``)."""

    def __init__(self, step_key: str) -> None:
        super().__init__(step_key)
        self.step_key = step_key


class Cancelled(BaseException):
    """Unwinds the workflow when the run was cancelled; compensation follows."""


@dataclass(slots=True)
class _History:
    """The recorded history, indexed for replay."""

    positional: dict[str, Event] = field(default_factory=lambda: {})
    intents: dict[str, Event] = field(default_factory=lambda: {})
    failed_attempts: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    first_suspension: dict[str, Event] = field(default_factory=lambda: {})

    @classmethod
    def index(cls, events: list[Event]) -> _History:
        h = cls()
        for ev in events:
            key = ev.step_key
            if key is None:
                continue
            if ev.kind in POSITIONAL_KINDS:
                h.positional[key.partition(":")[0]] = ev
            elif ev.kind is EventKind.INTENT:
                h.intents[key] = ev
            elif ev.kind is EventKind.ATTEMPT_FAILED:
                h.failed_attempts[key] += 1
                h.intents.pop(key, None)  # that attempt's outcome is known: it failed
            elif ev.kind is EventKind.SUSPENDED:
                h.first_suspension.setdefault(key, ev)
            elif ev.kind is EventKind.RECONCILED:
                h.intents.pop(key, None)
                if ev.data and ev.data.get("outcome") in ("succeeded", "failed"):
                    # The operator's verdict stands in the step's position.
                    h.positional[key.partition(":")[0]] = ev
        return h


def error_info(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


class EmbeddedRunContext:
    """One drive of one run. Lives only as long as the drive."""

    def __init__(self, driver: RunDriver, history: list[Event]) -> None:
        self._driver = driver
        self._history = _History.index(history)
        self._consumed: set[str] = set()
        self._pending: list[NewEvent] = []  # replay-only facts flushed with the next write
        self.compensations: list[Compensation] = []
        self.positions = Positions()
        #: Set once replay disagreed with the history, met a record it cannot read, or
        #: the lease was lost. The drive is over even if the workflow's own
        #: ``except Exception`` swallowed the error.
        self.broken: DeterminismError | LeaseLostError | CorruptHistoryError | None = None

    def enter(self) -> None:
        """Bind the root position scope to the task about to run the workflow."""
        self.positions.enter()

    def _fail(
        self, exc: DeterminismError | LeaseLostError | CorruptHistoryError
    ) -> DeterminismError | LeaseLostError | CorruptHistoryError:
        if self.broken is None:
            self.broken = exc
        return self.broken

    def _read(self, ev: Event, what: str, decode: Callable[[], Any]) -> Any:
        """``decode()`` of recorded event ``ev``; a value that cannot be read back (corrupt,
        or not the shape this event has) parks the run naming the event, never fails it."""
        try:
            return decode()
        except Exception as exc:
            raise self._fail(
                CorruptHistoryError(
                    self.run_id,
                    ev.seq,
                    f"{what} of {ev.kind.value} {ev.step_key!r} cannot be read back: "
                    f"{type(exc).__name__}: {exc}",
                    step_key=ev.step_key,
                )
            ) from exc

    @property
    def run_id(self) -> str:
        return self._driver.lease.run_id

    @property
    def url(self) -> str:
        return self._driver.backend.url

    def fail_determinism(self, error: DeterminismError) -> DeterminismError:
        broken = self._fail(error)
        return broken if isinstance(broken, DeterminismError) else error

    # -- positions -------------------------------------------------------------------

    def _position(self) -> str:
        if self.broken is not None:
            raise self.broken
        return self.positions.next()

    def _recorded(self, position: str, key: str, kinds: tuple[EventKind, ...]) -> Event | None:
        ev = self._history.positional.get(position)
        if ev is None:
            return None
        self._consumed.add(position)
        if ev.kind is EventKind.RECONCILED and ev.step_key == key:
            return ev
        if ev.step_key != key or ev.kind not in kinds:
            raise self._fail(
                DeterminismError(
                    self.run_id,
                    key,
                    f"the code asks for {key!r} ({'/'.join(k.value for k in kinds)}) where "
                    f"the history recorded {ev.step_key!r} ({ev.kind.value}); the code "
                    "changed under an in-flight run",
                )
            )
        return ev

    def check_fully_replayed(self) -> None:
        """The workflow finished: every recorded step must have been reached."""
        # Keyed steps ("~...") belong to code a framework may skip on resume.
        left = sorted(
            p
            for p in set(self._history.positional) - self._consumed
            if not p.startswith(KEYED_PREFIX)
        )
        if left:
            ev = self._history.positional[left[0]]
            raise self._fail(
                DeterminismError(
                    self.run_id,
                    ev.step_key or left[0],
                    "the history recorded this step but the code finished without reaching "
                    "it; the code changed under an in-flight run",
                )
            )

    # -- writes ----------------------------------------------------------------------

    async def write(self, *events: NewEvent, consume_signal: int | None = None) -> None:
        if self.broken is not None:
            raise self.broken
        batch = [*self._pending, *events]
        self._pending.clear()
        try:
            await self._driver.append(batch, consume_signal=consume_signal)
        except LeaseLostError as exc:
            raise self._fail(exc) from None
        if self._driver.lease.cancel_requested and not self._driver.cancelling:
            raise Cancelled()

    def _check_cancel(self) -> None:
        if self._driver.lease.cancel_requested and not self._driver.cancelling:
            raise Cancelled()

    def suspend(
        self,
        key: str,
        *,
        waiting_for: str | None,
        wake_at: float | None,
        extra: list[NewEvent] | None = None,
        detail: dict[str, Any] | None = None,
        attention: dict[str, Any] | None = None,
    ) -> Interrupt:
        events = [*self._pending, *(extra or [])]
        self._pending.clear()
        events.append(
            NewEvent(
                EventKind.SUSPENDED,
                key,
                waiting_for,
                {"waiting_for": waiting_for, "wake_at": wake_at, **(detail or {})},
            )
        )
        return Interrupt(
            RunUpdate(
                RunStatus.SUSPENDED, waiting_for=waiting_for, wake_at=wake_at, attention=attention
            ),
            events,
        )

    # -- RunContext ------------------------------------------------------------------

    def idempotency_key(self) -> str:
        return f"{self.run_id}:{current_step_key.get()}"

    def keyed(self, key: str) -> AbstractContextManager[None]:
        return self.positions.keyed(key)

    def patched(self, marker: str) -> bool:
        position = self.positions.peek()
        key = f"{position}:patch:{marker}"
        ev = self._history.positional.get(position)
        if ev is not None:
            if ev.kind is EventKind.MARKER and ev.step_key == key:
                self._position()
                self._consumed.add(position)
                return True
            return False  # recorded before the patch existed: keep the old path
        self._position()
        self._pending.append(NewEvent(EventKind.MARKER, key, marker))
        return True

    async def step(
        self, spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        key = f"{self._position()}:{spec.name}"
        ev = self._recorded(
            key.partition(":")[0], key, (EventKind.STEP_COMPLETED, EventKind.STEP_FAILED)
        )
        if ev is not None:
            failure: StepFailedError | None = self._read(ev, "the outcome", lambda: _failure(ev))
            if failure is not None:
                raise failure
            result = self._read(
                ev,
                "the result",
                lambda: from_jsonable(_data(ev).get("result"), f"run {self.run_id!r} step {key!r}"),
            )
            if spec.compensate is not None:
                self.compensations.append(Compensation(key, spec.compensate, result))
            return result

        if self._driver.backend.replay_only:
            raise ReplayEnd(key)
        if self._driver.backend.draining:
            raise Drained()
        carried = self._driver.carried.pop(key, None)
        if carried is not None:
            # This process ran the step in a drive that stopped, because the substrate
            # went away, before recording it: record what is known rather than run it
            # again (or park a non-idempotent effect whose outcome is in hand).
            await self.write(carried)
            result = from_jsonable(_data(carried).get("result"), f"step {key!r}")
            if spec.compensate is not None:
                self.compensations.append(Compensation(key, spec.compensate, result))
            return result
        self._check_cancel()
        non_idempotent = spec.kind == "effect" and not spec.idempotent_receiver
        if non_idempotent and key in self._history.intents:
            raise self._park(key, spec, self._history.intents[key], args, kwargs)
        attempt = self._history.failed_attempts[key] + 1
        while True:
            if non_idempotent:
                await self.write(NewEvent(EventKind.INTENT, key, spec.name, {"attempt": attempt}))
            token = current_step_key.set(key)
            started = time.time()
            try:
                result = await call_plain(fn, args, kwargs)
            except Exception as exc:
                if isinstance(exc, OutcomeUnknownError) and non_idempotent:
                    raise self._park(key, spec, None, args, kwargs, str(exc)) from exc
                retryable = spec.retry.should_retry(exc, attempt) or (
                    isinstance(exc, OutcomeUnknownError) and attempt < spec.retry.max_attempts
                )
                if not retryable:
                    info = error_info(exc)
                    await self.write(
                        NewEvent(
                            EventKind.STEP_FAILED,
                            key,
                            spec.name,
                            {"attempts": attempt, "error": info, "kind": spec.kind},
                        )
                    )
                    raise StepFailedError(key, attempt, info["type"], info["message"]) from exc
                delay = spec.retry.delay(attempt)
                await self.write(
                    NewEvent(
                        EventKind.ATTEMPT_FAILED,
                        key,
                        spec.name,
                        {"attempt": attempt, "error": error_info(exc), "retry_in": delay},
                    )
                )
                attempt += 1
                if self._driver.backend.draining:
                    raise Drained() from None  # the next attempt is for the next worker
                await asyncio.sleep(delay)
                continue
            finally:
                current_step_key.reset(token)
            try:
                encoded = to_jsonable(result, f"result of step {key!r}")
            except SerializationError as exc:
                info = error_info(exc)
                await self.write(
                    NewEvent(
                        EventKind.STEP_FAILED,
                        key,
                        spec.name,
                        {"attempts": attempt, "error": info, "kind": spec.kind},
                    )
                )
                raise StepFailedError(key, attempt, info["type"], info["message"]) from exc
            if spec.compensate is not None:
                # Before the write: a cancellation seen by that write must compensate it.
                self.compensations.append(Compensation(key, spec.compensate, result))
            await self.write(
                NewEvent(
                    EventKind.STEP_COMPLETED,
                    key,
                    spec.name,
                    {
                        "result": encoded,
                        "attempt": attempt,
                        "kind": spec.kind,
                        "duration": round(time.time() - started, 6),
                    },
                )
            )
            return result

    def _park(
        self,
        key: str,
        spec: StepSpec,
        intent: Event | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        reason: str | None = None,
    ) -> Interrupt:
        try:
            shown_args: Any = to_jsonable({"args": list(args), "kwargs": kwargs})
        except SerializationError:
            shown_args = repr((args, kwargs))
        attention = {
            "reason": "unknown-outcome",
            "step_key": key,
            "name": spec.name,
            "arguments": shown_args,
            "intent_at": intent.at if intent is not None else time.time(),
            "message": reason
            or "the process died after recording the intent and before "
            "recording the outcome; the receiver may or may not have acted",
        }
        events = [*self._pending, NewEvent(EventKind.NEEDS_ATTENTION, key, spec.name, attention)]
        self._pending.clear()
        return Interrupt(RunUpdate(RunStatus.NEEDS_ATTENTION, attention=attention), events)

    async def wait_for_signal(
        self, name: str, timeout: float | None, details: dict[str, Any] | None = None
    ) -> Any:
        key = f"{self._position()}:signal:{name}"
        ev = self._recorded(key.partition(":")[0], key, (EventKind.SIGNAL_RECEIVED,))
        if ev is not None:
            timeout_error: SignalTimeoutError | None = self._read(
                ev, "the timeout", lambda: _timed_out(ev, name)
            )
            if timeout_error is not None:
                raise timeout_error
            return self._read(
                ev,
                "the payload",
                lambda: from_jsonable(
                    _data(ev).get("payload"), f"run {self.run_id!r} signal {key!r}"
                ),
            )
        self._check_cancel()
        sig = await self._driver.read(self._driver.store.next_signal(self.run_id, name))
        first = self._history.first_suspension.get(key)
        if sig is not None:
            await self.write(
                NewEvent(
                    EventKind.SIGNAL_RECEIVED,
                    key,
                    name,
                    {
                        "payload": sig.payload,
                        "sent_by": sig.sent_by,
                        "sent_at": sig.sent_at,
                        "signal_id": sig.signal_id,
                        "waited": round(sig.sent_at - first.at, 6) if first is not None else 0.0,
                    },
                ),
                consume_signal=sig.signal_id,
            )
            return from_jsonable(sig.payload, f"run {self.run_id!r} signal {key!r}")
        deadline: float | None = None
        if timeout is not None:
            if first is not None and first.data and first.data.get("deadline") is not None:
                deadline = float(first.data["deadline"])
            else:
                deadline = time.time() + timeout
            if time.time() >= deadline:
                await self.write(
                    NewEvent(
                        EventKind.SIGNAL_RECEIVED,
                        key,
                        name,
                        {"timed_out": True, "timeout": timeout},
                    )
                )
                raise SignalTimeoutError(name, timeout)
        shown = to_jsonable(details, f"details of wait {key!r}") if details else None
        raise self.suspend(
            key,
            waiting_for=name,
            wake_at=deadline,
            detail={"deadline": deadline, "details": shown},
            attention=shown,
        )

    async def sleep(self, seconds: float) -> None:
        key = f"{self._position()}:sleep"
        ev = self._recorded(key.partition(":")[0], key, (EventKind.TIMER_STARTED,))
        if ev is not None:
            wake_at: float = self._read(
                ev, "the wake time", lambda: float(_data(ev).get("wake_at", 0))
            )
            if time.time() >= wake_at:
                return
            raise self.suspend(key, waiting_for=None, wake_at=wake_at)
        self._check_cancel()
        wake_at = time.time() + seconds
        timer = NewEvent(
            EventKind.TIMER_STARTED, key, "sleep", {"seconds": seconds, "wake_at": wake_at}
        )
        if seconds <= 0:
            await self.write(timer)
            return
        raise self.suspend(key, waiting_for=None, wake_at=wake_at, extra=[timer])


def _data(ev: Event | NewEvent) -> dict[str, Any]:
    data: dict[str, Any] = ev.data or {}
    return data


def _failure(ev: Event) -> StepFailedError | None:
    """The ``StepFailedError`` a recorded outcome stands for, if it is a failure."""
    data: dict[str, Any] = ev.data or {}
    if ev.kind is not EventKind.STEP_FAILED and data.get("outcome") != "failed":
        return None
    err: dict[str, Any] = data.get("error") or {}
    return StepFailedError(
        str(ev.step_key),
        int(data.get("attempts", 1)),
        str(err.get("type", "Error")),
        str(err.get("message", "")),
    )


def _timed_out(ev: Event, name: str) -> SignalTimeoutError | None:
    data: dict[str, Any] = ev.data or {}
    if not data.get("timed_out"):
        return None
    return SignalTimeoutError(name, float(data.get("timeout") or 0))
