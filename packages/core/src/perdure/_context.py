"""What a running workflow talks to: the ``RunContext`` a backend provides.

The public functions in ``perdure._steps`` look up the current context here; outside a
run there is none and they are transparent.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from perdure._errors import DeterminismError
from perdure._retry import DEFAULT_RETRY, RetryPolicy

StepKind = Literal["step", "effect"]


@dataclass(frozen=True, slots=True)
class StepSpec:
    """How one step is recorded, retried and compensated."""

    name: str
    kind: StepKind = "step"
    retry: RetryPolicy = DEFAULT_RETRY
    #: For effects: True when the receiver dedupes on ``idempotency_key()`` (retry with
    #: the same key after a crash); False records an intent first and parks the run
    #: as needs-attention when a crash leaves the outcome unknown.
    idempotent_receiver: bool = False
    #: Called with the step's result when the run is cancelled after it completed.
    compensate: Callable[[Any], Any] | None = None


class RunContext(Protocol):
    """The durable operations of one run, implemented by each backend."""

    @property
    def run_id(self) -> str: ...

    @property
    def url(self) -> str:
        """The backend URL the run lives on (adapters keep their own state beside it)."""
        ...

    def fail_determinism(self, error: DeterminismError) -> DeterminismError:
        """Report a history mismatch found outside ``step`` (e.g. by an adapter): the
        drive stops and the run parks, even if user code swallows the error. Returns
        the error to raise."""
        ...

    async def step(
        self, spec: StepSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Return the recorded result of this step, or execute and record it."""
        ...

    async def wait_for_signal(
        self, name: str, timeout: float | None, details: dict[str, Any] | None = None
    ) -> Any:
        """Return the payload of the next signal ``name``, suspending until it arrives.

        ``details`` (what is pending, e.g. a tool call awaiting approval) is shown on
        the suspended run to whoever lists it."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait durably; the run may be suspended and resumed elsewhere."""
        ...

    def patched(self, marker: str) -> bool:
        """True on runs that reach this point with code containing the patch."""
        ...

    def keyed(self, key: str) -> AbstractContextManager[None]:
        """Journal the steps inside under ``key`` instead of their position."""
        ...

    def idempotency_key(self) -> str:
        """The key of the step executing now."""
        ...


current_run: ContextVar[RunContext | None] = ContextVar("perdure_current_run", default=None)
#: The key of the step whose function is executing, for ``idempotency_key()``.
current_step_key: ContextVar[str | None] = ContextVar("perdure_current_step", default=None)


def recording_run() -> RunContext | None:
    """The run that records a durable operation called now, or None to call it plainly.

    None outside a run, and inside a step: the step's own record covers whatever its
    function calls, so a step, model call or tool nested in it is not recorded again.
    Every decorator and adapter hook asks this before recording anything.
    """
    ctx = current_run.get()
    if ctx is None or current_step_key.get() is not None:
        return None
    return ctx


def report_determinism(error: DeterminismError) -> DeterminismError:
    """Report a history mismatch found outside ``step`` (by an adapter) to the current
    run, if any, so its drive parks even if user code swallows the error; returns the
    error to raise."""
    ctx = current_run.get()
    return error if ctx is None else ctx.fail_determinism(error)
