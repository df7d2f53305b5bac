"""Executor liveness for DBOS without Conductor: heartbeats in perdure's own table.

DBOS recovers an executor's PENDING workflows when a process with the same executor id
launches again; for an executor that never comes back (a host gone for good) DBOS
documents recovery by another executor, which Conductor triggers when it sees the
executor unhealthy. Without Conductor, perdure supplies that signal: every launched
DBOS of perdure beats in ``perdure_dbos_executors``, and an executor whose beat is older
than the timeout (or whose row is gone: it shut down) is dead; a worker then asks DBOS
to recover that executor's workflows (``_compat.recover_executors``), which DBOS
re-enqueues so exactly one live executor of the run's application version takes each.

Beat times are the database's clock, so hosts with skewed clocks agree on an age.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable

import sqlalchemy as sa

from perdure.spi import owner_is_dead

log = logging.getLogger("perdure.dbos")

#: Seconds without a beat after which an executor is dead (``PERDURE_DBOS_EXECUTOR_TIMEOUT``).
DEFAULT_TIMEOUT = 30.0
#: Beats per timeout: a live executor misses several beats before it is declared dead.
BEATS_PER_TIMEOUT = 6


def executor_timeout() -> float:
    """The configured executor timeout, in seconds."""
    raw = os.environ.get("PERDURE_DBOS_EXECUTOR_TIMEOUT")
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        from perdure.spi import ConfigurationError

        raise ConfigurationError(
            f"PERDURE_DBOS_EXECUTOR_TIMEOUT={raw!r}: expected a positive number of seconds"
        )
    return value


def _now(engine: sa.Engine) -> sa.ColumnElement[float]:
    """The database's clock, in seconds since the epoch."""
    if engine.dialect.name == "sqlite":
        return sa.cast((sa.func.julianday("now") - 2440587.5) * 86400.0, sa.Float)
    return sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Float)


class Executors:
    """The ``perdure_dbos_executors`` table: one row per live executor, with its beat."""

    def __init__(self, engine: sa.Engine, schema: str | None) -> None:
        self.engine = engine
        self.meta = sa.MetaData(schema=schema)
        self.table = sa.Table(
            "perdure_dbos_executors",
            self.meta,
            sa.Column("executor_id", sa.Text, primary_key=True),
            sa.Column("application_version", sa.Text),
            sa.Column("beat_at", sa.Float, nullable=False),
            #: The DBOS queues it dequeues, space-separated: empty for a client process.
            sa.Column("queues", sa.Text),
        )

    def create(self) -> None:
        from perdure_dbos._tables import add_missing_columns

        self.meta.create_all(self.engine, checkfirst=True)
        add_missing_columns(self.engine, self.table)

    def beat(self, executor_id: str, version: str, queues: Iterable[str] = ()) -> None:
        t = self.table
        values = {
            "beat_at": _now(self.engine),
            "application_version": version,
            "queues": " ".join(sorted(queues)),
        }
        with self.engine.begin() as c:
            done = c.execute(sa.update(t).where(t.c.executor_id == executor_id).values(**values))
            if done.rowcount == 0:
                c.execute(sa.insert(t).values(executor_id=executor_id, **values))

    def forget(self, executor_id: str) -> None:
        """Remove the row: this executor stopped, its workflows may be recovered now."""
        t = self.table
        with self.engine.begin() as c:
            c.execute(sa.delete(t).where(t.c.executor_id == executor_id))

    def dead(self, executor_ids: Iterable[str], timeout: float) -> set[str]:
        """Which of ``executor_ids`` are dead: no row, a beat older than ``timeout``, or
        (for perdure's own per-process ids) a process gone from this host."""
        wanted = sorted(set(executor_ids))
        if not wanted:
            return set()
        t = self.table
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(t.c.executor_id, _now(self.engine) - t.c.beat_at).where(
                    t.c.executor_id.in_(wanted)
                )
            ).all()
        alive = {str(r[0]) for r in rows if float(r[1]) <= timeout}
        return {e for e in wanted if e not in alive or owner_is_dead(e)}

    def workers(self, timeout: float) -> dict[str, set[str]]:
        """The queues live workers dequeue, by application version (client processes,
        which dequeue nothing, are not workers)."""
        t = self.table
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(t.c.application_version, t.c.queues).where(
                    _now(self.engine) - t.c.beat_at <= timeout
                )
            ).all()
        out: dict[str, set[str]] = {}
        for version, queues in rows:
            if version is not None and queues:
                out.setdefault(str(version), set()).update(str(queues).split())
        return out


class Heartbeat:
    """A daemon thread beating for one executor until stopped (then its row is removed)."""

    def __init__(
        self, executors: Executors, executor_id: str, version: str, queues: Iterable[str] = ()
    ) -> None:
        self.executors = executors
        self.executor_id = executor_id
        self.version = version
        self.queues = tuple(queues)
        self.interval = executor_timeout() / BEATS_PER_TIMEOUT
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"perdure-dbos-heartbeat-{executor_id}", daemon=True
        )

    def start(self) -> None:
        self.executors.beat(
            self.executor_id, self.version, self.queues
        )  # alive before any run starts
        self._thread.start()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.interval):
            try:
                self.executors.beat(self.executor_id, self.version, self.queues)
            except Exception as exc:  # the database is away: beat again next time
                if not failing:
                    log.warning("executor %s cannot beat: %s", self.executor_id, exc)
                failing = True
            else:
                failing = False

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self.executors.forget(self.executor_id)
