"""perdure's own small table next to DBOS's system tables: what DBOS does not record.

One row per run: the perdure workflow name and code version, what the run waits for
(suspended), why it is parked (needs-attention) and whether cancellation was requested.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

SYNC_COLUMNS = ("waiting_for", "wake_at", "attention", "cancel_requested", "details")


@dataclass(slots=True)
class Mark:
    """The perdure-side state of one run."""

    run_id: str
    workflow: str
    code_version: str | None
    parent_run_id: str | None
    waiting_for: str | None
    wake_at: float | None
    attention: dict[str, Any] | None
    details: dict[str, Any] | None
    cancel_requested: bool
    updated_at: float


class Marks:
    """Reads and writes the ``perdure_runs`` table through DBOS's own engine."""

    def __init__(self, engine: sa.Engine, schema: str | None) -> None:
        self.engine = engine
        meta = sa.MetaData(schema=schema)
        self.table = sa.Table(
            "perdure_runs",
            meta,
            sa.Column("run_id", sa.Text, primary_key=True),
            sa.Column("workflow", sa.Text, nullable=False),
            sa.Column("code_version", sa.Text),
            sa.Column("parent_run_id", sa.Text),
            sa.Column("waiting_for", sa.Text),
            sa.Column("wake_at", sa.Float),
            sa.Column("attention", sa.Text),
            sa.Column("details", sa.Text),
            sa.Column("cancel_requested", sa.Integer, nullable=False, server_default="0"),
            sa.Column("updated_at", sa.Float, nullable=False),
        )
        self.keyed = sa.Table(
            "perdure_keyed_steps",
            meta,
            sa.Column("run_id", sa.Text, primary_key=True),
            sa.Column("step_key", sa.Text, primary_key=True),
            sa.Column("envelope", sa.Text, nullable=False),
            sa.Column("at", sa.Float, nullable=False),
        )
        self.meta = meta

    def get_keyed(self, run_id: str, key: str) -> dict[str, Any] | None:
        """The recorded envelope of the keyed step ``key`` (see ``perdure.keyed``)."""
        k = self.keyed
        with self.engine.connect() as c:
            row = c.execute(
                sa.select(k.c.envelope).where(k.c.run_id == run_id, k.c.step_key == key)
            ).first()
        return None if row is None else json.loads(row[0])

    def put_keyed(self, run_id: str, key: str, envelope: dict[str, Any]) -> None:
        k = self.keyed
        text = json.dumps(envelope)
        with self.engine.begin() as c:
            done = c.execute(
                sa.update(k)
                .where(k.c.run_id == run_id, k.c.step_key == key)
                .values(envelope=text, at=time.time())
            )
            if done.rowcount == 0:
                c.execute(
                    sa.insert(k).values(run_id=run_id, step_key=key, envelope=text, at=time.time())
                )

    def list_keyed(self, run_id: str) -> list[tuple[str, dict[str, Any], float]]:
        k = self.keyed
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(k.c.step_key, k.c.envelope, k.c.at)
                .where(k.c.run_id == run_id)
                .order_by(k.c.at)
            ).all()
        return [(str(r[0]), json.loads(r[1]), float(r[2])) for r in rows]

    def create(self) -> None:
        self.meta.create_all(self.engine, checkfirst=True)

    def insert(
        self, run_id: str, workflow: str, code_version: str | None, parent: str | None
    ) -> None:
        t = self.table
        with self.engine.begin() as c:
            exists = c.execute(sa.select(t.c.run_id).where(t.c.run_id == run_id)).first()
            if exists is None:
                c.execute(
                    sa.insert(t).values(
                        run_id=run_id,
                        workflow=workflow,
                        code_version=code_version,
                        parent_run_id=parent,
                        cancel_requested=0,
                        updated_at=time.time(),
                    )
                )

    def update(self, run_id: str, **values: Any) -> None:
        for key in ("attention", "details"):
            if key in values and values[key] is not None:
                values[key] = json.dumps(values[key])
        if "cancel_requested" in values:
            values["cancel_requested"] = int(bool(values["cancel_requested"]))
        values["updated_at"] = time.time()
        with self.engine.begin() as c:
            c.execute(sa.update(self.table).where(self.table.c.run_id == run_id).values(**values))

    def suspend(
        self,
        run_id: str,
        topic: str,
        *,
        wake_at: float | None,
        details: dict[str, Any] | None,
        inbox: sa.Table,
    ) -> bool:
        """Show the run as waiting for ``topic`` unless a message on it already waits in
        DBOS's ``inbox`` (its notifications table); one statement, so a sender that
        delivers and then calls ``take_signal`` never leaves a stale wait behind."""
        t = self.table
        pending = (
            sa.select(inbox.c.message_uuid)
            .where(
                inbox.c.destination_uuid == run_id,
                inbox.c.topic == topic,
                inbox.c.consumed.is_(False),
            )
            .exists()
        )
        values: dict[str, Any] = {
            "waiting_for": topic,
            "wake_at": wake_at,
            "details": json.dumps(details) if details is not None else None,
            "updated_at": time.time(),
        }
        with self.engine.begin() as c:
            done = c.execute(sa.update(t).where(t.c.run_id == run_id, ~pending).values(**values))
        return done.rowcount > 0

    def take_signal(self, run_id: str, topic: str) -> bool:
        """A message on ``topic`` was delivered: the run no longer waits for it. Whether
        it was waiting (one statement: of two callers for one topic, one gets True)."""
        t = self.table
        with self.engine.begin() as c:
            done = c.execute(
                sa.update(t)
                .where(t.c.run_id == run_id, t.c.waiting_for == topic)
                .values(waiting_for=None, wake_at=None, details=None, updated_at=time.time())
            )
        return done.rowcount > 0

    def get(self, run_id: str) -> Mark | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(self.table).where(self.table.c.run_id == run_id)).first()
        return None if row is None else _mark(row._mapping)

    def get_many(self, run_ids: list[str]) -> dict[str, Mark]:
        if not run_ids:
            return {}
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


def _mark(m: Any) -> Mark:
    return Mark(
        run_id=m["run_id"],
        workflow=m["workflow"],
        code_version=m["code_version"],
        parent_run_id=m["parent_run_id"],
        waiting_for=m["waiting_for"],
        wake_at=m["wake_at"],
        attention=json.loads(m["attention"]) if m["attention"] else None,
        details=json.loads(m["details"]) if m["details"] else None,
        cancel_requested=bool(m["cancel_requested"]),
        updated_at=float(m["updated_at"]),
    )
