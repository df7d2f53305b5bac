"""``DriveContext``: the ``RunContext`` of one drive, on any backend's ``Journal``.

What a step does on replay (return the recorded result, raise the recorded failure),
intent before action, retries, parking an unknown outcome, signals, durable sleep and
patch markers: all of it is here, once. The backend only makes records durable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from perdure._context import StepSpec, current_step_key
from perdure._errors import (
    CorruptHistoryError,
    DeterminismError,
    LeaseLostError,
    OutcomeUnknownError,
    SerializationError,
    SignalTimeoutError,
    StepFailedError,
)
from perdure._positions import KEYED_PREFIX, Compensation, Positions
from perdure._records import Event, EventKind, NewEvent, RunStatus, SignalRecord
from perdure._semantics import approvals
from perdure._semantics import events as ev
from perdure._semantics.attention import unknown_outcome
from perdure._semantics.history import History, position_of
from perdure._semantics.journal import Journal
from perdure._semantics.unresolved import unresolved_outcome
from perdure._serialization import from_jsonable, to_jsonable
from perdure._steps import call_plain
from perdure._store import RunUpdate

if TYPE_CHECKING:
    from perdure._semantics.observe import Observers

T = TypeVar("T")

__all__ = [
    "RUN_CANCELLED",
    "Cancelled",
    "Drained",
    "DriveContext",
    "DriveStopped",
    "Interrupt",
    "ReplayEnd",
]

#: The message a backend cancels a drive's task with when the run itself is cancelled
#: while a step is in flight (Temporal: the drive activity's cancellation). The step's
#: body sees ``CancelledError``; the step then ends the run's way (``Cancelled``, or
#: parked for an effect whose outcome nobody knows). Any other cancellation of the task
#: (a shutdown, a timeout) propagates as it is.
RUN_CANCELLED = "perdure: the run was cancelled"


class Interrupt(BaseException):
    """Unwinds the workflow when the drive stops without finishing (suspended, parked):
    ``events`` and ``update`` are the drive's last append.

    A BaseException so that ``except Exception`` in user code cannot swallow it.
    """

    def __init__(self, update: RunUpdate, events: list[NewEvent]) -> None:
        super().__init__(update.status.value)
        self.update = update
        self.events = events


class Cancelled(BaseException):
    """Unwinds the workflow when the run was cancelled; compensation follows."""


class DriveStopped(BaseException):
    """Unwinds the workflow when the journal failed (lease lost, substrate error): the
    drive ends with nothing more written and ``drive`` raises ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Drained(BaseException):
    """Unwinds a drive at its next step while the process shuts down gracefully
    (``Journal.draining``): what ran is recorded, nothing new starts."""


class ReplayEnd(BaseException):
    """A replay-only drive reached work its history does not record: it stops there,
    before running anything (see ``perdure._engine.replay_check``)."""

    def __init__(self, step_key: str) -> None:
        super().__init__(step_key)
        self.step_key = step_key


class DriveContext:
    """One drive of one run: replays ``history`` and records the rest in ``journal``."""

    def __init__(
        self,
        journal: Journal,
        history: Iterable[Event],
        *,
        replay_only: bool = False,
        carried: dict[str, NewEvent] | None = None,
        observers: Observers | None = None,
    ) -> None:
        self.journal = journal
        #: Told of every append and how long the journal took (metrics, traces).
        self.observers = observers
        #: Completions of steps an earlier drive of this run in this process executed
        #: but could not record (the journal failed): recorded on the way, not re-run.
        #: The scheduler passes the same dict to the run's next drive.
        self.carried: dict[str, NewEvent] = {} if carried is None else carried
        #: Stop before the first step the history does not record (``ReplayEnd``).
        self.replay_only = replay_only
        self._history = History.index(history)
        self._consumed: set[str] = set()
        self._pending: list[NewEvent] = []  # replay-only facts flushed with the next write
        # Parallel steps (asyncio tasks of one run) append one at a time, in order.
        self._writing = asyncio.Lock()
        self.compensations: list[Compensation] = []
        self.positions = Positions()
        #: Set while compensations run: a cancellation no longer interrupts.
        self.cancelling = False
        #: Set once replay disagreed with the history: the drive parks at its end even
        #: if the workflow's own ``except Exception`` swallowed the error.
        self.mismatch: DeterminismError | None = None
        #: Set once a recorded value could not be read back: the drive parks at its end.
        self.unreadable: CorruptHistoryError | None = None
        #: Set once the journal failed: nothing more is written and the drive raises it.
        self.stopped: BaseException | None = None

    def enter(self) -> None:
        """Bind the root position scope to the task about to run the workflow."""
        self.positions.enter()

    @property
    def run_id(self) -> str:
        return self.journal.run_id

    @property
    def url(self) -> str:
        return self.journal.url

    def fail_determinism(self, error: DeterminismError) -> DeterminismError:
        if self.mismatch is None:
            self.mismatch = error
        return self.mismatch

    @property
    def broken(self) -> BaseException | None:
        """Why the drive cannot go on, if it cannot: the journal's error, a history
        mismatch, or a record that cannot be read back."""
        return self.stopped or self.mismatch or self.unreadable

    def _check_broken(self) -> None:
        if self.stopped is not None:
            raise DriveStopped(self.stopped)
        if self.mismatch is not None:
            raise self.mismatch
        if self.unreadable is not None:
            raise self.unreadable

    # -- positions -------------------------------------------------------------------

    def _position(self) -> str:
        self._check_broken()
        return self.positions.next()

    def _recorded(self, key: str, kinds: tuple[EventKind, ...]) -> Event | None:
        position = position_of(key)
        recorded = self._history.positional.get(position)
        if recorded is None:
            return None
        self._consumed.add(position)
        if recorded.kind is EventKind.RECONCILED and recorded.step_key == key:
            return recorded
        if recorded.step_key != key or recorded.kind not in kinds:
            raise self.fail_determinism(
                DeterminismError(
                    self.run_id,
                    key,
                    f"the code asks for {key!r} ({'/'.join(k.value for k in kinds)}) where "
                    f"the history recorded {recorded.step_key!r} ({recorded.kind.value}); "
                    "the code changed under an in-flight run",
                )
            )
        return recorded

    def check_fully_replayed(self) -> None:
        """The workflow finished: every recorded step must have been reached."""
        # Keyed steps ("~...") belong to code a framework may skip on resume.
        left = sorted(
            p
            for p in set(self._history.positional) - self._consumed
            if not p.startswith(KEYED_PREFIX)
        )
        if left:
            recorded = self._history.positional[left[0]]
            raise self.fail_determinism(
                DeterminismError(
                    self.run_id,
                    recorded.step_key or left[0],
                    "the history recorded this step but the code finished without reaching "
                    "it; the code changed under an in-flight run",
                )
            )

    # -- writes ----------------------------------------------------------------------

    async def append(
        self,
        events: list[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        """One journal append, serialised and timed for the observers; a journal error
        propagates as it is."""
        async with self._writing:
            started = time.perf_counter()
            await self.journal.append(events, update=update, consume_signal=consume_signal)
            if self.observers is not None:
                self.observers.appended(events, time.perf_counter() - started)

    async def write(self, *events: NewEvent, consume_signal: int | None = None) -> None:
        """Record ``events`` from inside the workflow (with pending replay-only facts)."""
        self._check_broken()
        batch = [*self._pending, *events]
        self._pending.clear()
        try:
            await self.append(batch, consume_signal=consume_signal)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not isinstance(exc, LeaseLostError):
                for event in batch:
                    if event.kind is EventKind.STEP_COMPLETED and event.step_key is not None:
                        self.carried[event.step_key] = event
            raise self._stop(exc) from None
        self._check_cancel()

    def _stop(self, exc: BaseException) -> DriveStopped:
        if self.stopped is None:
            self.stopped = exc
        return DriveStopped(self.stopped)

    async def record_cancel_request(self) -> None:
        """Record who cancelled the run and the authorizer's decision, when an operator's
        cancel left them in the inbox (``Backend.cancel``, ``perdure._operator``); once."""
        sig = await self._next_signal(ev.CANCEL_RECORD)
        if sig is not None:
            await self.write(ev.cancel_requested(sig), consume_signal=sig.signal_id)

    async def _next_signal(self, name: str) -> SignalRecord | None:
        try:
            return await self.journal.next_signal(name)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            raise self._stop(exc) from None

    def _read(self, recorded: Event, what: str, decode: Callable[[], T]) -> T:
        """``decode()`` of a recorded event; a value that cannot be read back (corrupt,
        or not the shape this event has) parks the run naming the event, never fails it."""
        try:
            return decode()
        except Exception as exc:
            raise self._corrupt(
                CorruptHistoryError(
                    self.run_id,
                    recorded.seq,
                    f"{what} of {recorded.kind.value} {recorded.step_key!r} cannot be read "
                    f"back: {type(exc).__name__}: {exc}",
                    step_key=recorded.step_key,
                )
            ) from exc

    def _corrupt(self, error: CorruptHistoryError) -> CorruptHistoryError:
        if self.unreadable is None:
            self.unreadable = error
        return self.unreadable

    def _run_cancelled(self, exc: asyncio.CancelledError) -> bool:
        """``exc`` is the run's cancellation (``RUN_CANCELLED``), delivered to a step in
        flight: the task goes on (it compensates), so the cancellation is taken back."""
        if RUN_CANCELLED not in exc.args or self.cancelling or not self.journal.cancel_requested:
            return False
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            task.uncancel()
        return True

    def _check_cancel(self) -> None:
        if self.journal.cancel_requested and not self.cancelling:
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
        # History names the wait's signal; the run's record holds an approval's channel.
        named = approvals.APPROVAL if approvals.request_of(waiting_for) else waiting_for
        events = [*self._pending, *(extra or []), ev.suspended(key, named, wake_at, detail)]
        self._pending.clear()
        return Interrupt(
            RunUpdate(
                RunStatus.SUSPENDED, waiting_for=waiting_for, wake_at=wake_at, attention=attention
            ),
            events,
        )

    def park(self, attention: dict[str, Any], key: str | None, name: str | None) -> Interrupt:
        """End the drive with the run ``needs-attention`` for ``attention``."""
        events = [*self._pending, ev.needs_attention(attention, key, name)]
        self._pending.clear()
        return Interrupt(RunUpdate(RunStatus.NEEDS_ATTENTION, attention=attention), events)

    # -- RunContext ------------------------------------------------------------------

    def idempotency_key(self) -> str:
        return f"{self.run_id}:{current_step_key.get()}"

    def keyed(self, key: str) -> AbstractContextManager[None]:
        return self.positions.keyed(key)

    def patched(self, marker: str) -> bool:
        position = self.positions.peek()
        key = f"{position}:patch:{marker}"
        recorded = self._history.positional.get(position)
        if recorded is not None:
            if recorded.kind is EventKind.MARKER and recorded.step_key == key:
                self._position()
                self._consumed.add(position)
                return True
            return False  # recorded before the patch existed: keep the old path
        self._position()
        self._pending.append(ev.marker(key, marker))
        return True

    async def step(
        self, spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        key = f"{self._position()}:{spec.name}"
        recorded = self._recorded(key, (EventKind.STEP_COMPLETED, EventKind.STEP_FAILED))
        if recorded is not None:
            return self._replayed(key, spec, recorded)
        if self.replay_only:
            raise ReplayEnd(key)
        if self.journal.draining:
            raise Drained()
        carried = self.carried.pop(key, None)
        if carried is not None:
            # This process ran the step in a drive that stopped before recording it:
            # record what is known rather than run it again (or park an effect whose
            # outcome is in hand).
            await self.write(carried)
            data: dict[str, Any] = carried.data or {}
            result = from_jsonable(data.get("result"), f"step {key!r}")
            if spec.compensate is not None:
                self.compensations.append(Compensation(key, spec.compensate, result))
            return result
        self._check_cancel()
        non_idempotent = spec.kind == "effect" and not spec.idempotent_receiver
        if non_idempotent and key in self._history.intents:
            intent = self._history.intents[key]
            raise self.park(
                unknown_outcome(key, spec.name, args, kwargs, intent_at=intent.at), key, spec.name
            )
        attempt = self._history.failed_attempts[key] + 1
        while True:
            if non_idempotent:
                await self.write(ev.intent(key, spec.name, attempt))
            token = current_step_key.set(key)
            started = time.time()
            try:
                result = await call_plain(fn, args, kwargs)
            except asyncio.CancelledError as exc:
                if not self._run_cancelled(exc):
                    raise
                if non_idempotent:  # its intent is recorded; did the receiver act?
                    attention = unknown_outcome(
                        key,
                        spec.name,
                        args,
                        kwargs,
                        intent_at=None,
                        message="the run was cancelled while the effect was in flight; "
                        "the receiver may or may not have acted",
                    )
                    raise self.park(attention, key, spec.name) from None
                raise Cancelled() from None
            except Exception as exc:
                # The receiver refuses to apply it again (the gateway's unknown outcome):
                # a retry cannot help, whatever the effect declares.
                unresolved = unresolved_outcome(exc) if spec.kind == "effect" else None
                if unresolved is not None or (
                    isinstance(exc, OutcomeUnknownError) and non_idempotent
                ):
                    attention = unknown_outcome(
                        key, spec.name, args, kwargs, intent_at=None, message=unresolved or str(exc)
                    )
                    raise self.park(attention, key, spec.name) from exc
                retryable = spec.retry.should_retry(exc, attempt) or (
                    isinstance(exc, OutcomeUnknownError) and attempt < spec.retry.max_attempts
                )
                if not retryable:
                    await self._fail_step(key, spec, attempt, exc)
                delay = spec.retry.delay(attempt)
                await self.write(ev.attempt_failed(key, spec.name, attempt, exc, delay))
                attempt += 1
                if self.journal.draining:
                    raise Drained() from None  # the next attempt is for the next worker
                await asyncio.sleep(delay)
                continue
            finally:
                current_step_key.reset(token)
            redacted: list[str] = []
            try:
                encoded = to_jsonable(result, f"result of step {key!r}", hits=redacted)
                if redacted:
                    # What is recorded is what every replay returns: the workflow gets the
                    # redacted value now too, so it behaves the same after a crash.
                    result = from_jsonable(encoded, f"result of step {key!r}")
            except SerializationError as exc:
                await self._fail_step(key, spec, attempt, exc)
            if spec.compensate is not None:
                # Before the write: a cancellation seen by that write must compensate it.
                self.compensations.append(Compensation(key, spec.compensate, result))
            duration = time.time() - started
            await self.write(
                ev.step_completed(key, spec.name, spec.kind, encoded, attempt, duration)
            )
            return result

    def _replayed(self, key: str, spec: StepSpec, recorded: Event) -> Any:
        """The recorded outcome of a step: its result, or its failure raised again."""
        failure = self._read(recorded, "the outcome", lambda: _failure(recorded))
        if failure is not None:
            raise failure
        result = self._read(
            recorded,
            "the result",
            lambda: from_jsonable(
                _data(recorded).get("result"), f"run {self.run_id!r} step {key!r}"
            ),
        )
        if spec.compensate is not None:
            self.compensations.append(Compensation(key, spec.compensate, result))
        return result

    async def _fail_step(self, key: str, spec: StepSpec, attempts: int, exc: Exception) -> NoReturn:
        """Record the step's permanent failure and raise it at the call site."""
        info = ev.error_info(exc)
        await self.write(ev.step_failed(key, spec.name, spec.kind, attempts, info))
        raise StepFailedError(key, attempts, info["type"], info["message"]) from exc

    async def wait_for_signal(
        self, name: str, timeout: float | None, details: dict[str, Any] | None = None
    ) -> Any:
        key = f"{self._position()}:signal:{name}"
        recorded = self._recorded(key, (EventKind.SIGNAL_RECEIVED,))
        if recorded is not None:
            timed_out = self._read(recorded, "the timeout", lambda: _timed_out(recorded, name))
            if timed_out is not None:
                raise timed_out
            return self._read(
                recorded,
                "the payload",
                lambda: from_jsonable(
                    _data(recorded).get("payload"), f"run {self.run_id!r} signal {key!r}"
                ),
            )
        self._check_cancel()
        # An approval wait listens on its own request's channel only: no signal sent
        # before it began, or for another request, can answer it (``approvals``).
        request = approvals.request_id(self.run_id, key) if name == approvals.APPROVAL else None
        awaited = name if request is None else approvals.channel(request)
        sig = await self._next_signal(awaited)
        first = self._history.first_suspension.get(key)
        if sig is not None:
            waited = sig.sent_at - first.at if first is not None else 0.0
            await self.write(
                ev.signal_received(key, name, sig, waited, request_id=request),
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
                await self.write(ev.signal_timed_out(key, name, timeout))
                raise SignalTimeoutError(name, timeout)
        shown = to_jsonable(details, f"details of wait {key!r}") if details else None
        detail: dict[str, Any] = {"deadline": deadline, "details": shown}
        if request is not None:
            detail["request_id"] = request
        raise self.suspend(
            key, waiting_for=awaited, wake_at=deadline, detail=detail, attention=shown
        )

    async def sleep(self, seconds: float) -> None:
        key = f"{self._position()}:sleep"
        recorded = self._recorded(key, (EventKind.TIMER_STARTED,))
        if recorded is not None:
            wake_at = self._read(
                recorded, "the wake time", lambda: float(_data(recorded).get("wake_at", 0))
            )
            if time.time() >= wake_at:
                return
            raise self.suspend(key, waiting_for=None, wake_at=wake_at)
        self._check_cancel()
        wake_at = time.time() + seconds
        timer = ev.timer_started(key, seconds, wake_at)
        if seconds <= 0:
            await self.write(timer)
            return
        raise self.suspend(key, waiting_for=None, wake_at=wake_at, extra=[timer])


def _data(recorded: Event | NewEvent) -> dict[str, Any]:
    data: dict[str, Any] = recorded.data or {}
    return data


def _failure(recorded: Event) -> StepFailedError | None:
    """The ``StepFailedError`` a recorded outcome stands for, if it is a failure."""
    data = _data(recorded)
    if recorded.kind is not EventKind.STEP_FAILED and data.get("outcome") != "failed":
        return None
    err: dict[str, Any] = data.get("error") or {}
    return StepFailedError(
        str(recorded.step_key),
        int(data.get("attempts", 1)),
        str(err.get("type", "Error")),
        str(err.get("message", "")),
    )


def _timed_out(recorded: Event, name: str) -> SignalTimeoutError | None:
    data = _data(recorded)
    if not data.get("timed_out"):
        return None
    return SignalTimeoutError(name, float(data.get("timeout") or 0))
