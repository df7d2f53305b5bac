"""Drives one run of the embedded engine: the shared semantics on a ``Store`` journal.

``RunDriver`` is the ``Journal`` of one drive (``perdure._semantics.journal``): every
append is the store's fenced append under the driver's lease, extending it. A store
call that fails unwinds the drive as ``SubstrateFault``; a transient one is raised to
the backend (which drives the run again after a backoff), a permanent one parks it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from perdure._engine.outages import SubstrateFault
from perdure._errors import LeaseLostError, PerdureError, SubstrateError
from perdure._records import NewEvent, RunStatus, SignalRecord
from perdure._semantics import Drained, drive, park_broken
from perdure._semantics.events import encode_input
from perdure._store import Lease, RunUpdate, Store
from perdure._workflow import Workflow

if TYPE_CHECKING:
    from perdure._engine.backend import EmbeddedBackend

__all__ = ["RunDriver", "encode_input"]

log = logging.getLogger("perdure.engine")

T = TypeVar("T")


class RunDriver:
    """Owns ``lease`` for the length of one drive of its run."""

    def __init__(
        self,
        backend: EmbeddedBackend,
        lease: Lease,
        workflow: Workflow[..., Any],
        carried: dict[str, NewEvent] | None = None,
    ) -> None:
        self.backend = backend
        self.store: Store = backend.store
        self.lease = lease
        self.workflow = workflow
        #: Completions of steps an earlier drive of this run in this process executed
        #: but could not record (the substrate went away): recorded, not re-run.
        self.carried: dict[str, NewEvent] = {} if carried is None else carried

    # -- Journal -----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def url(self) -> str:
        return self.backend.url

    @property
    def cancel_requested(self) -> bool:
        return self.lease.cancel_requested

    @property
    def draining(self) -> bool:
        return self.backend.draining.is_set()

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        update: RunUpdate | None = None,
        consume_signal: int | None = None,
    ) -> None:
        await self.read(
            self.store.append(
                self.lease,
                events,
                lease_seconds=self.backend.lease_seconds,
                update=update,
                consume_signal=consume_signal,
            )
        )

    async def next_signal(self, name: str) -> SignalRecord | None:
        return await self.read(self.store.next_signal(self.run_id, name))

    async def read(self, call: Awaitable[T]) -> T:
        """A store call of the drive; its failure unwinds the drive (``SubstrateFault``),
        except a lost lease, which stays itself."""
        try:
            return await call
        except LeaseLostError:
            raise
        except Exception as exc:
            raise self._fault(exc) from exc

    def _fault(self, exc: Exception) -> SubstrateFault:
        # An error no one classified came from the store itself, not from user code.
        return SubstrateFault(exc, self.store.classify(exc) or "permanent")

    # -- driving -----------------------------------------------------------------------

    async def drive(self) -> RunStatus | None:
        """Run the workflow to its next stop. Returns the status written, or None when
        the lease was lost to another owner or the process is draining.

        Raises ``SubstrateFault`` when the substrate failed and the run could not even
        be parked: the caller drives it again later (``EmbeddedBackend``).
        """
        run_id = self.lease.run_id
        try:
            info = await self.store.get_run(run_id)
            history = await self.store.load_history(run_id)
        except Exception as exc:
            if self.store.classify(exc) == "transient":
                raise SubstrateFault(exc, "transient") from exc
            log.error("run %s cannot be replayed: %s", run_id, exc)
            return await park_broken(self, exc)
        try:
            status = await drive(
                self,
                self.workflow,
                info.input,
                history,
                replay_only=self.backend.replay_only,
                carried=self.carried,
                details=info.details,
            )
        except LeaseLostError:
            log.info("run %s: lease lost to another owner; stopping this drive", run_id)
            status = None
        except Drained:
            log.info("run %s: shutting down; released for another worker", run_id)
            with contextlib.suppress(Exception):
                await self.store.release(self.lease)
            status = None
        except SubstrateFault as fault:
            if fault.transient:
                raise
            log.error("run %s: the substrate refused: %s; parking it", run_id, fault.error)
            error = fault.error
            if not isinstance(error, PerdureError):
                error = SubstrateError(f"{type(error).__name__}: {error}")
            status = await park_broken(self, error)
        return status
