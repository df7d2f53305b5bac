"""perdure's two small tables next to DBOS's system tables: what DBOS does not record.

``perdure_dbos_runs``: one row per run, the perdure side of its status (workflow name,
code version, the last ``RunUpdate`` of a drive: suspended for what, parked why, the
result) and whether cancellation was asked for. ``perdure_dbos_inbox``: signals and
operators' records (``resume``, ``reconcile``) sent to a run, with ids; a drive takes
each at most once, by id, in the history it records (never by a flag here, which a
crash could set without the record).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from perdure.spi import RunStatus, RunUpdate, SignalRecord, approvals
from perdure_dbos import _compat

#: The ``name`` of an inbox row that holds an operator's events, not a signal.
ADMIN = "__perdure_admin__"


class AnswerArrived(Exception):
    """The approval request a drive was about to time out was answered first: the drive
    must be run again (it takes the answer), nothing of it recorded."""


class _NotOwned(Exception):
    """Rolls ``Marks.suspend``'s transaction back: another execution owns the workflow."""


@dataclass(slots=True)
class Mark:
    """The perdure-side state of one run."""

    run_id: str
    workflow: str
    code_version: str | None
    parent_run_id: str | None
    status: str
    waiting_for: str | None
    wake_at: float | None
    attention: dict[str, Any] | None
    result: Any
    error: dict[str, Any] | None
    cancel_requested: bool
    updated_at: float
    #: What the run recorded at its start (``RunInfo.details``: its trace context).
    details: dict[str, Any]
    #: Deliveries to the run so far (``Marks.suspend``).
    deliveries: int = 0


class Marks:
    """Reads and writes perdure's tables through DBOS's own engine."""

    def __init__(self, engine: sa.Engine, schema: str | None) -> None:
        self.engine = engine
        meta = sa.MetaData(schema=schema)
        self.table = sa.Table(
            "perdure_dbos_runs",
            meta,
            sa.Column("run_id", sa.Text, primary_key=True),
            sa.Column("workflow", sa.Text, nullable=False),
            sa.Column("code_version", sa.Text),
            sa.Column("parent_run_id", sa.Text),
            sa.Column("status", sa.Text, nullable=False),
            sa.Column("waiting_for", sa.Text),
            sa.Column("wake_at", sa.Float),
            sa.Column("attention", sa.Text),
            sa.Column("result", sa.Text),
            sa.Column("error", sa.Text),
            sa.Column("cancel_requested", sa.Integer, nullable=False, server_default="0"),
            sa.Column("updated_at", sa.Float, nullable=False),
            sa.Column("details", sa.Text),
            #: Deliveries to the run (signals, answers, operators' records, cancellation),
            #: counted: a drive suspends only if none came since it loaded (``suspend``).
            sa.Column("deliveries", sa.Integer),
        )
        self.inbox = sa.Table(
            "perdure_dbos_inbox",
            meta,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("run_id", sa.Text, nullable=False, index=True),
            sa.Column("name", sa.Text, nullable=False),
            sa.Column("payload", sa.Text),
            sa.Column("sent_by", sa.Text),
            sa.Column("sent_at", sa.Float, nullable=False),
            sa.Column("authorization", sa.Text),
        )
        self.meta = meta

    def create(self) -> None:
        self.meta.create_all(self.engine, checkfirst=True)
        add_missing_columns(self.engine, self.table)

    # -- runs ----------------------------------------------------------------------------

    def insert(
        self,
        run_id: str,
        workflow: str,
        code_version: str | None,
        parent: str | None,
        details: dict[str, Any] | None = None,
    ) -> None:
        # One statement: a row already there (a start retried with the run's id) stays.
        insert = _insert(self.engine)(self.table).values(
            run_id=run_id,
            workflow=workflow,
            code_version=code_version,
            parent_run_id=parent,
            status=RunStatus.PENDING.value,
            cancel_requested=0,
            updated_at=time.time(),
            details=_dump(details or None),
        )
        with self.engine.begin() as c:
            c.execute(insert.on_conflict_do_nothing(index_elements=["run_id"]))

    def apply(self, run_id: str, update: RunUpdate, taken: Collection[int] = ()) -> bool:
        """Write a drive's last ``update`` (after its record is durable); return whether
        cancellation was asked for, read in the same transaction.

        A suspension on a signal already in the inbox (beyond ``taken``, the inbox ids
        the history took) is due now, and an approval request already answered stays
        answered: a delivery in flight while the drive looked did not see the run
        waiting, so this write sees the delivery. The run's row is written first, then
        the inbox read, as every delivery does (``deliver``): of the two, the later
        one sees the earlier's write."""
        t = self.table
        now = time.time()
        values: dict[str, Any] = {
            "updated_at": now,
            "status": update.status.value,
            "waiting_for": update.waiting_for,
            "wake_at": update.wake_at,
            "attention": _dump(update.attention),
            "result": _dump(update.result),
            "error": _dump(update.error),
        }
        awaited = update.waiting_for if update.status is RunStatus.SUSPENDED else None
        with self.engine.begin() as c:
            cancel = self._write(c, run_id, values)
            if awaited is not None and self._arrived(c, run_id, awaited, taken):
                due: dict[str, Any] = {"wake_at": now}
                if approvals.request_of(awaited) is not None:
                    due.update(waiting_for=None, attention=None)
                c.execute(sa.update(t).where(t.c.run_id == run_id).values(**due))
            return cancel

    def _write(self, c: sa.Connection, run_id: str, values: dict[str, Any]) -> bool:
        """Update the run's row; return its cancel flag, read by the same statement (the
        update holds the row: no cancel request lands between)."""
        t = self.table
        done = c.execute(
            sa.update(t)
            .where(t.c.run_id == run_id)
            .values(**values)
            .returning(t.c.cancel_requested)
        )
        return bool(done.scalar())

    def show_running(self, run_id: str, *, closing: str | None = None) -> bool:
        """Show the run running (its drive records past its last stop); return whether
        cancellation was asked for. ``closing``: the channel of an approval request this
        drive is about to time out; if it was answered first, nothing is written and
        ``AnswerArrived`` is raised (an accepted answer is never lost)."""
        values = {
            "status": RunStatus.RUNNING.value,
            "waiting_for": None,
            "wake_at": None,
            "attention": None,
            "updated_at": time.time(),
        }
        with self.engine.begin() as c:
            cancel = self._write(c, run_id, values)
            if closing is not None and self._arrived(c, run_id, closing, ()):
                raise AnswerArrived(f"run {run_id!r}: {closing} was answered first")
            return cancel

    def _arrived(self, c: sa.Connection, run_id: str, name: str, taken: Collection[int]) -> bool:
        """Whether an inbox row ``name`` of the run, beyond ``taken``, is stored."""
        i = self.inbox
        ids = c.execute(sa.select(i.c.id).where(i.c.run_id == run_id, i.c.name == name))
        return any(int(row[0]) not in taken for row in ids)

    def _cancel_flag(self, c: sa.Connection, run_id: str) -> bool:
        t = self.table
        return bool(c.execute(sa.select(t.c.cancel_requested).where(t.c.run_id == run_id)).scalar())

    def cancel_requested(self, run_id: str) -> bool:
        with self.engine.connect() as c:
            return self._cancel_flag(c, run_id)

    def request_cancel(self, run_id: str) -> None:
        """Ask the run to cancel, and wake it if it is suspended (see ``deliver``)."""
        t = self.table
        with self.engine.begin() as c:
            c.execute(
                sa.update(t)
                .where(t.c.run_id == run_id)
                .values(cancel_requested=1, updated_at=time.time(), deliveries=_counted(t))
            )
            _compat.wake_workflow(c, run_id)

    def suspend(
        self, run_id: str, seen: int, owner_xid: str, wake_at: float | None, queue: str
    ) -> str:
        """End the run's DBOS execution as suspended until ``wake_at`` (None: until a
        delivery), if nothing was delivered since the drive loaded (``seen``): one
        transaction. ``"suspended"``; ``"woken"`` if a delivery came (drive again: it may
        be what the run waits for); ``"lost"`` if this execution no longer owns the
        workflow.

        No wake-up is lost between the two sides: this and every delivery (``deliver``,
        ``deliver_answer``, ``request_cancel``) write the run's row first, so they
        serialize on it (a row lock on PostgreSQL, the write lock on SQLite). A delivery
        that wrote first has counted itself, and this comparison sees it; one that comes
        after finds the workflow suspended (``DELAYED``) and enqueues it."""
        t = self.table
        wake_ms = None if wake_at is None else int(wake_at * 1000)
        try:
            with self.engine.begin() as c:
                same = c.execute(
                    sa.update(t)
                    .where(t.c.run_id == run_id, sa.func.coalesce(t.c.deliveries, 0) == seen)
                    .values(updated_at=time.time())
                )
                if same.rowcount != 1:
                    return "woken"
                if not _compat.suspend_workflow(c, run_id, owner_xid, wake_ms, queue):
                    raise _NotOwned
        except _NotOwned:
            return "lost"  # rolled back
        return "suspended"

    def get(self, run_id: str) -> Mark | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(self.table).where(self.table.c.run_id == run_id)).first()
        return None if row is None else _mark(row._mapping)

    @staticmethod
    def of(row: dict[str, Any] | None) -> Mark | None:
        """The ``Mark`` of a run row read elsewhere (joined to DBOS's status)."""
        return None if row is None else _mark(row)

    def get_many(self, run_ids: list[str]) -> dict[str, Mark]:
        out: dict[str, Mark] = {}
        with self.engine.connect() as c:
            for i in range(0, len(run_ids), 500):
                rows = c.execute(
                    sa.select(self.table).where(self.table.c.run_id.in_(run_ids[i : i + 500]))
                )
                for row in rows:
                    m = _mark(row._mapping)
                    out[m.run_id] = m
        return out

    def delete(self, run_ids: list[str]) -> None:
        """Delete perdure's rows (the run's and its inbox) of ``run_ids``."""
        with self.engine.begin() as c:
            for table in (self.inbox, self.table):
                c.execute(sa.delete(table).where(table.c.run_id.in_(run_ids)))

    # -- inbox ---------------------------------------------------------------------------

    def deliver(
        self,
        run_id: str,
        name: str,
        payload: Any,
        sent_by: str | None,
        authorization: dict[str, Any] | None = None,
    ) -> int:
        """Put a signal (or, under ``ADMIN``, an operator's events) in the run's inbox; a
        run suspended on it is due now (its row written first: see ``apply``)."""
        t, i = self.table, self.inbox
        now = time.time()
        awaited = sa.and_(t.c.status == RunStatus.SUSPENDED.value, t.c.waiting_for == name)
        with self.engine.begin() as c:
            c.execute(
                sa.update(t)
                .where(t.c.run_id == run_id)
                .values(
                    deliveries=_counted(t),
                    wake_at=sa.case((awaited, now), else_=t.c.wake_at),
                )
            )
            done = c.execute(
                sa.insert(i).values(
                    run_id=run_id,
                    name=name,
                    payload=json.dumps(payload),
                    sent_by=sent_by,
                    sent_at=now,
                    authorization=_dump(authorization),
                )
            )
            key = done.inserted_primary_key
            _compat.wake_workflow(c, run_id)
        return int(key[0]) if key is not None else 0

    def deliver_answer(
        self,
        run_id: str,
        topic: str,
        payload: Any,
        sent_by: str | None,
        authorization: dict[str, Any] | None = None,
    ) -> bool:
        """Store the answer to the approval request whose channel is ``topic``, only while
        the run waits on it; one transaction, so of two answers exactly one is stored (and
        the run is due now)."""
        t, i = self.table, self.inbox
        now = time.time()
        with self.engine.begin() as c:
            done = c.execute(
                sa.update(t)
                .where(t.c.run_id == run_id, t.c.waiting_for == topic)
                .values(
                    waiting_for=None,
                    attention=None,
                    wake_at=now,
                    updated_at=now,
                    deliveries=_counted(t),
                )
            )
            if done.rowcount != 1:
                return False
            c.execute(
                sa.insert(i).values(
                    run_id=run_id,
                    name=topic,
                    payload=json.dumps(payload),
                    sent_by=sent_by,
                    sent_at=now,
                    authorization=_dump(authorization),
                )
            )
            _compat.wake_workflow(c, run_id)
        return True

    def waiting(
        self, run_id: str, name: str, taken: set[int], *, after: int = 0
    ) -> list[SignalRecord]:
        """Inbox rows ``name`` of ``run_id`` not in ``taken``, oldest first."""
        i = self.inbox
        query = (
            sa.select(i.c.id, i.c.payload, i.c.sent_by, i.c.sent_at, i.c.authorization)
            .where(i.c.run_id == run_id, i.c.name == name, i.c.id > after)
            .order_by(i.c.id)
        )
        with self.engine.connect() as c:
            rows = c.execute(query).all()
        return [
            SignalRecord(int(r[0]), run_id, name, json.loads(r[1]), r[2], float(r[3]), _load(r[4]))
            for r in rows
            if int(r[0]) not in taken
        ]


def located(engine: sa.Engine, table: sa.Table) -> tuple[str | None, str]:
    """``table``'s real schema and its quoted, qualified name: DBOS's engine maps its
    placeholder schema to the real one, which text DDL and the inspector need spelled out."""
    translate = engine.get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(table.schema, table.schema)
    quote = engine.dialect.identifier_preparer.quote
    return schema, f"{quote(schema)}.{quote(table.name)}" if schema else quote(table.name)


def add_missing_columns(engine: sa.Engine, table: sa.Table) -> None:
    """Add the columns of ``table`` added since it was first created (``create_all``
    only creates)."""
    schema, name = located(engine, table)
    quote = engine.dialect.identifier_preparer.quote
    have = {c["name"] for c in sa.inspect(engine).get_columns(table.name, schema=schema)}
    with engine.begin() as c:
        for column in (c for c in table.columns if c.name not in have):
            kind = column.type.compile(dialect=engine.dialect)
            c.execute(sa.text(f"ALTER TABLE {name} ADD COLUMN {quote(column.name)} {kind}"))


def _insert(engine: sa.Engine) -> Any:
    """The dialect's ``insert`` (it has ``on_conflict_do_nothing``)."""
    if engine.dialect.name == "sqlite":
        return sqlite.insert
    return postgresql.insert


def _counted(t: sa.Table) -> Any:
    """One more delivery to the run (see ``Marks.suspend``)."""
    return sa.func.coalesce(t.c.deliveries, 0) + 1


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _mark(m: Any) -> Mark:
    return Mark(
        run_id=m["run_id"],
        workflow=m["workflow"],
        code_version=m["code_version"],
        parent_run_id=m["parent_run_id"],
        status=m["status"],
        waiting_for=m["waiting_for"],
        wake_at=m["wake_at"],
        attention=_load(m["attention"]),
        result=_load(m["result"]),
        error=_load(m["error"]),
        cancel_requested=bool(m["cancel_requested"]),
        updated_at=float(m["updated_at"]),
        details=_load(m["details"]) or {},
        deliveries=int(m["deliveries"] or 0),
    )
