"""No pickle, ever: a DBOS row marked ``py_pickle`` is refused unread by every read path.

DBOS decodes a row by its ``serialization`` column, and ``py_pickle`` means
``pickle.loads``. The rows planted here would create a marker file when unpickled; every
command an operator or a worker runs on them (``runs list``, ``runs show``, ``runs
export``, ``wait``, a worker's recovery, DBOS's own API in a perdure process) must leave
the marker absent, name the run and the row, and keep listing the other runs.
"""

from __future__ import annotations

import base64
import json
import pickle
import socket
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS

import perdure
from perdure import RunStatus
from perdure.testing import Processes, Receiver, wait_for_status
from perdure_dbos import DbosUrl
from perdure_dbos._serializer import ForeignRowError, PickleRefusedError

#: A perdure executor id whose process is gone (no such pid on this host).
DEAD = f"{socket.gethostname().replace(':', '_')}:99999999:0:deadbeef"


class Plant:
    """Unpickling this creates ``marker``: proof that something ran a pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def payload(marker: Path) -> str:
    """What DBOS stores for a ``py_pickle`` value: base64 of the pickle."""
    return base64.b64encode(pickle.dumps(Plant(marker))).decode()


def engine_of(url: str) -> tuple[sa.Engine, str | None]:
    parsed = DbosUrl.parse(url)
    system = parsed.system_database_url
    if system.startswith("postgresql://"):
        system = "postgresql+psycopg://" + system.removeprefix("postgresql://")
        return sa.create_engine(system), parsed.schema or "dbos"
    return sa.create_engine(system), None


def plant(url: str, marker: Path, *, in_steps: str, in_status: str, orphans: list[str]) -> None:
    """Behind DBOS's back: step #1 of ``in_steps`` and the status row of ``in_status``
    become pickles; every run in ``orphans`` is left to a dead executor."""
    engine, schema = engine_of(url)
    evil = payload(marker)
    try:
        meta = sa.MetaData(schema=schema)
        oo = sa.Table("operation_outputs", meta, autoload_with=engine)
        ws = sa.Table("workflow_status", meta, autoload_with=engine)
        wi = sa.Table("workflow_input", meta, autoload_with=engine)
        with engine.begin() as conn:
            done = conn.execute(
                sa.update(oo)
                .where(oo.c.workflow_uuid == in_steps, oo.c.function_id == 1)
                .values(output=evil, serialization="py_pickle")
            )
            assert done.rowcount == 1
            done = conn.execute(
                sa.update(ws)
                .where(ws.c.workflow_uuid == in_status)
                .values(inputs=evil, output=evil, serialization="py_pickle")
            )
            assert done.rowcount == 1
            conn.execute(sa.update(wi).where(wi.c.workflow_uuid == in_status).values(inputs=evil))
            done = conn.execute(
                sa.update(ws)
                .where(ws.c.workflow_uuid.in_(orphans))
                .values(executor_id=DEAD, status="PENDING")
            )
            assert done.rowcount == len(orphans)
    finally:
        engine.dispose()


def test_dbos_pickle_decoder_is_replaced_in_process(tmp_path: Path) -> None:
    from dbos._serialization import DBOSDefaultSerializer, deserialize_value

    marker = tmp_path / "ran"
    with pytest.raises(PickleRefusedError):
        DBOSDefaultSerializer.deserialize(payload(marker))
    with pytest.raises(PickleRefusedError):
        deserialize_value(payload(marker), "py_pickle", DBOSDefaultSerializer)
    with pytest.raises(PickleRefusedError):
        DBOSDefaultSerializer.serialize({"x": 1})  # and nothing is written as pickle
    assert not marker.exists()


async def test_pickle_rows_are_refused_by_every_read_command(
    perdure_backend: Any,
    perdure_url: str,
    processes: Processes,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import dbos_flows

    marker = tmp_path / "pickle-ran"
    # Oldest first: a worker's recovery pass reaches r-fine last.
    for run_id in ("r-fine", "r-steps", "r-status"):
        await perdure_backend.start(dbos_flows.approval, (run_id,), {}, run_id=run_id)
    await perdure_backend.idle()
    await perdure_backend.close()  # nothing in this process drives them any more
    plant(
        perdure_url,
        marker,
        in_steps="r-steps",
        in_status="r-status",
        orphans=["r-fine", "r-steps", "r-status"],
    )

    listed = processes.cli("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = {r["run_id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert set(runs) == {"r-fine", "r-steps", "r-status"}
    assert runs["r-fine"]["status"] == "suspended"  # listed as usual
    assert runs["r-status"]["status"] == "needs-attention"
    assert runs["r-status"]["attention"]["reason"] == "corrupt"
    assert "py_pickle" in runs["r-status"]["attention"]["message"]
    assert not marker.exists()
    table = processes.cli("runs", "list")
    assert table.returncode == 0, table.stderr
    assert "r-fine" in table.stdout and "r-status" in table.stdout
    assert not marker.exists()

    for command in ("show", "export"):
        for run_id, row in (("r-steps", "operation_outputs row #1"), ("r-status", "workflow_s")):
            shown = processes.cli("runs", command, run_id)
            assert shown.returncode != 0, shown.stdout
            assert run_id in shown.stderr and row in shown.stderr, shown.stderr
            assert "py_pickle" in shown.stderr, shown.stderr
            assert not marker.exists()

    await perdure_backend.open()
    with pytest.raises(ForeignRowError, match=r"'r-status'.*workflow_status row.*py_pickle"):
        await perdure_backend.wait("r-status", timeout=30)
    with pytest.raises(ForeignRowError, match=r"'r-steps'.*operation_outputs row #1"):
        await perdure_backend.history("r-steps")
    # DBOS's own API in a perdure process reads the rows through the refusing decoder.
    # (DBOS shows a row it cannot decode as its raw text.)
    await DBOS.list_workflows_async()
    await DBOS.list_workflow_steps_async("r-steps")
    await DBOS.get_workflow_status_async("r-status")
    assert not marker.exists()

    # A worker recovers what it can read: r-steps is replayed up to the planted row and
    # parks naming it; r-status is not taken at all; r-fine goes on as if nothing happened.
    worker = processes.worker("dbos_flows")
    # (wait, not wait_for_status: that one also reads the history, which is refused)
    parked = await perdure_backend.wait("r-steps", timeout=120, drive=False)
    assert parked.status is RunStatus.NEEDS_ATTENTION, parked
    assert parked.attention is not None
    assert parked.attention["reason"] == "CorruptHistoryError", parked.attention
    assert "py_pickle" in parked.attention["message"]
    await wait_for_status(perdure_backend, "r-fine", (RunStatus.SUSPENDED,))
    await perdure_backend.signal("r-fine", perdure.APPROVAL, {"approved": False}, by="ann")
    done = await wait_for_status(perdure_backend, "r-fine", (RunStatus.SUCCEEDED,))
    assert done.result == {"approved": False}
    listed = await perdure_backend.list_runs()
    status_row = next(r for r in listed if r.run_id == "r-status")
    assert status_row.status is RunStatus.NEEDS_ATTENTION
    worker.kill()
    assert executor_of(perdure_url, "r-status") == DEAD  # never taken: DBOS never read it
    assert not marker.exists()


def executor_of(url: str, run_id: str) -> str | None:
    engine, schema = engine_of(url)
    try:
        ws = sa.Table("workflow_status", sa.MetaData(schema=schema), autoload_with=engine)
        with engine.connect() as conn:
            return conn.execute(
                sa.select(ws.c.executor_id).where(ws.c.workflow_uuid == run_id)
            ).scalar_one()
    finally:
        engine.dispose()
