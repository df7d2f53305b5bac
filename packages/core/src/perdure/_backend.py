"""The ``Backend`` interface: what the public API and the CLI need from a substrate.

The embedded engine (SQLite, PostgreSQL), Temporal and DBOS each implement it; the
user's code never names the class, a URL picks it (``perdure.connect``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from perdure._authorization import Authorizer, Decision
from perdure._errors import (
    ConfigurationError,
    DeterminismError,
    NeedsAttentionError,
    RunCancelledError,
    RunFailedError,
)
from perdure._masking import mask_url
from perdure._operator import OperatorActions
from perdure._operator import ReconcileOutcome as ReconcileOutcome  # re-exported
from perdure._records import Event, RunInfo, RunStatus
from perdure._serialization import from_jsonable
from perdure._validation import check_name
from perdure._workflow import Workflow

#: The names each entry point takes from its caller, and how an error calls them.
_NAMES: dict[str, dict[str, str]] = {
    "start": {"run_id": "run id", "parent_run_id": "parent run id"},
    "get_run": {"run_id": "run id"},
    "history": {"run_id": "run id"},
    "wait": {"run_id": "run id"},
}


def _validating(fn: Callable[..., Any], names: dict[str, str]) -> Callable[..., Any]:
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    async def checked(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind(*args, **kwargs).arguments
        for param, field in names.items():
            value = given.get(param)
            if value is not None:
                check_name(value, field)
        return await fn(*args, **kwargs)

    checked.__perdure_validated__ = True  # type: ignore[attr-defined]
    return checked


class Backend(OperatorActions, ABC):
    """A substrate that stores and drives durable runs.

    Every subclass's entry points check the names they are given (``perdure._validation``)
    before running, so all backends accept and refuse the same run ids and names. The
    operator verbs (``signal``, ``approve``, ``reject``, ``cancel``, ``resume``,
    ``reconcile``) are ``OperatorActions``': each is authorized, then the subclass's
    ``_signal``/``_cancel``/``_resume``/``_reconcile`` acts.
    """

    url: str
    _draining: asyncio.Event | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for method, names in _NAMES.items():
            fn = cls.__dict__.get(method)
            if inspect.iscoroutinefunction(fn) and not hasattr(fn, "__perdure_validated__"):
                setattr(cls, method, _validating(fn, names))

    async def __aenter__(self) -> Backend:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abstractmethod
    async def open(self) -> None:
        """Connect (and migrate). Idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Stop driving, release leases, close connections (``shutdown`` with the
        default grace period)."""

    @property
    def draining(self) -> asyncio.Event:
        """Set when a drain begins (``shutdown``, ``close``, a worker told to stop) and
        until the backend is opened again: it takes no new work and its drives stop
        before their next step. Await ``draining.wait()`` to act once a drain is under
        way (a deploy script, a test), instead of guessing when; it stays set after the
        drain, so a late waiter returns at once."""
        if self._draining is None:
            self._draining = asyncio.Event()
        return self._draining

    async def shutdown(self, *, grace: float | None = None) -> None:
        """Drain, then close: take no new work, let in-flight steps finish and record
        for up to ``grace`` seconds (default 30), release the runs for another worker.
        A backend that drains on its own substrate overrides this, and sets
        ``draining`` before its first await."""
        self.draining.set()
        await self.close()

    @abstractmethod
    async def start(
        self,
        workflow: Workflow[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        run_id: str,
        parent_run_id: str | None = None,
    ) -> RunHandle:
        """Create the run and begin driving it; an existing ``run_id`` is returned as is."""

    @abstractmethod
    async def get_run(self, run_id: str) -> RunInfo:
        """The run now; ``RunNotFoundError`` for an unknown id."""

    @abstractmethod
    async def list_runs(
        self,
        *,
        statuses: Sequence[RunStatus] | None = None,
        older_than: float | None = None,
        workflow: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Runs, newest first; ``older_than`` in seconds since their last update."""

    @abstractmethod
    async def history(self, run_id: str) -> list[Event]:
        """The run's full history, oldest first."""

    async def delete_finished(self, run_ids: Sequence[str]) -> list[str]:
        """Delete those of ``run_ids`` that are finished, with everything the backend
        keeps for them; the ids deleted (see ``perdure._retention.prune``). A backend
        that cannot delete runs says so."""
        raise NotImplementedError(f"the {type(self).__name__} backend cannot delete runs yet")

    async def check_substrate_replay(self, run_id: str) -> str | None:
        """What the substrate's own replay of the run's execution finds wrong with this
        code (``perdure replay`` reports it beside perdure's check), or None. Only a
        backend whose substrate replays its own code (Temporal's ``perdure.run``
        workflow) has anything to check."""
        return None

    @abstractmethod
    async def wait(
        self, run_id: str, *, timeout: float | None = None, drive: bool = True
    ) -> RunInfo:
        """Wait until the run stops (terminal or parked). With ``drive``, this process
        drives the run whenever it is due and its workflow is registered here."""

    @abstractmethod
    async def idle(self) -> None:
        """Return once no run this process drives is still moving: each one finished,
        suspended or parked (what a short-lived process waits for before exiting)."""

    @abstractmethod
    async def serve(
        self,
        *,
        stop: asyncio.Event,
        concurrency: int = 100,
        queue: str | None = None,
        rate: float | None = None,
    ) -> None:
        """Be a worker: recover and drive due runs of every registered workflow until ``stop``.

        ``queue`` names the substrate's queue this worker takes work from (``perdure worker
        --queue``) and ``rate`` caps the work started from it per second (``--rate``, an
        LLM's rate limit). A backend whose substrate has neither refuses them
        (``refuse_queue_options``)."""

    def refuse_queue_options(self, queue: str | None, rate: float | None) -> None:
        """Raise ``ConfigurationError`` if ``serve`` was given a queue or a rate that this
        backend's substrate has no notion of."""
        given = [name for name, value in (("--queue", queue), ("--rate", rate)) if value]
        if given:
            raise ConfigurationError(
                f"{' and '.join(given)}: {mask_url(self.url)} has no queues or rate limits "
                "(Temporal task queues and DBOS queues do)"
            )


def run_filter(
    *,
    statuses: Sequence[RunStatus] | None = None,
    older_than: float | None = None,
    workflow: str | None = None,
) -> Callable[[RunInfo], bool]:
    """``list_runs``' arguments as a test of one run, for a backend whose substrate
    cannot filter (or filters only roughly) by perdure's fields."""
    before = None if older_than is None else time.time() - older_than

    def wanted(info: RunInfo) -> bool:
        if statuses is not None and info.status not in statuses:
            return False
        if workflow is not None and info.workflow != workflow:
            return False
        return before is None or info.updated_at <= before

    return wanted


class RunHandle:
    """A started run. Cheap to create; every method asks the backend."""

    def __init__(self, backend: Backend, run_id: str) -> None:
        self.backend = backend
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id!r} on {self.backend.url}>"

    async def info(self) -> RunInfo:
        return await self.backend.get_run(self.run_id)

    async def status(self) -> RunStatus:
        return (await self.info()).status

    async def result(self, *, timeout: float | None = None) -> Any:
        """Wait for the run to end and return its result.

        Raises ``RunFailedError``, ``RunCancelledError``, ``NeedsAttentionError`` or
        ``DeterminismError`` as the run ends or parks; ``TimeoutError`` after ``timeout``.
        """
        info = await self.backend.wait(self.run_id, timeout=timeout)
        return outcome(info)

    async def signal(
        self,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
    ) -> Decision:
        """``Backend.signal`` of this run: authorized first, the decision recorded."""
        return await self.backend.signal(
            self.run_id, name, payload, by=by, token=token, authorizer=authorizer
        )

    async def cancel(
        self,
        *,
        by: str | None = None,
        token: str | None = None,
        authorizer: Authorizer | str | None = None,
    ) -> RunInfo:
        """``Backend.cancel`` of this run: authorized first, the decision recorded."""
        return await self.backend.cancel(self.run_id, by=by, token=token, authorizer=authorizer)

    async def history(self) -> list[Event]:
        return await self.backend.history(self.run_id)


def outcome(info: RunInfo) -> Any:
    """The run's result, or the typed error its end or parking stands for."""
    if info.status is RunStatus.SUCCEEDED:
        return from_jsonable(info.result, f"result of run {info.run_id!r}")
    if info.status is RunStatus.FAILED:
        raise RunFailedError(info.run_id, info.error or {})
    if info.status is RunStatus.CANCELLED:
        raise RunCancelledError(info.run_id)
    if info.status is RunStatus.NEEDS_ATTENTION:
        attention = info.attention or {}
        if attention.get("reason") == "determinism":
            raise DeterminismError(
                info.run_id, str(attention.get("step_key")), str(attention.get("message"))
            )
        step_key = attention.get("step_key")
        raise NeedsAttentionError(
            info.run_id,
            None if step_key is None else str(step_key),
            reason=str(attention.get("reason") or "unknown-outcome"),
            detail=None if attention.get("message") is None else str(attention["message"]),
        )
    raise RuntimeError(f"run {info.run_id!r} is still {info.status.value}")
