"""`perdure runs prune` on DBOS: a finished run's DBOS workflow (status, steps, messages)
and perdure's rows of it are deleted, after its export; a waiting run keeps everything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import perdure
from perdure import RunStatus
from perdure import _retention as retention
from perdure._errors import RunNotFoundError
from perdure._retention import export_name
from perdure.testing import Receiver, wait_for_status
from perdure_dbos._backend import runtime
from perdure_dbos._tables import located


@pytest.fixture
def flows(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PERDURE_TEST_RECEIVER", receiver.url)
    import dbos_flows

    return dbos_flows


def rows_of(run_id: str) -> dict[str, int]:
    """Rows naming ``run_id`` in DBOS's tables and perdure's, read behind the backend."""
    marks = runtime().marks
    schema, _ = located(marks.engine, marks.table)
    meta = sa.MetaData(schema=schema)
    counts: dict[str, int] = {}
    with marks.engine.connect() as c:
        for name, column in (
            ("workflow_status", "workflow_uuid"),
            ("operation_outputs", "workflow_uuid"),
            ("notifications", "destination_uuid"),
            ("perdure_dbos_runs", "run_id"),
            ("perdure_dbos_inbox", "run_id"),
        ):
            table = sa.Table(name, meta, autoload_with=c)
            query = sa.select(sa.func.count()).where(table.c[column] == run_id)
            counts[name] = int(c.execute(query).scalar_one())
    return counts


async def test_prune_deletes_finished_runs_whole_and_keeps_a_waiting_one(
    perdure_backend: Any, flows: Any, tmp_path: Path
) -> None:
    for run_id in ("p-done", "p-cancelled", "p-waiting"):
        await perdure_backend.start(flows.approval, (run_id,), {}, run_id=run_id)
    for run_id in ("p-done", "p-cancelled", "p-waiting"):
        await wait_for_status(perdure_backend, run_id, (RunStatus.SUSPENDED,))
    await perdure_backend.signal("p-done", perdure.APPROVAL, {"approved": False}, by="ops")
    await perdure_backend.cancel("p-cancelled")
    assert (await perdure_backend.wait("p-done", timeout=60)).status is RunStatus.SUCCEEDED
    assert (await perdure_backend.wait("p-cancelled", timeout=60)).status is RunStatus.CANCELLED
    before = rows_of("p-done")
    assert before["workflow_status"] == 1 and before["operation_outputs"] > 0
    assert before["perdure_dbos_runs"] == 1 and before["perdure_dbos_inbox"] == 1

    report = await retention.prune(perdure_backend, older_than=0, export_dir=tmp_path)
    assert (report.matched, report.deleted, report.exported) == (2, 2, 2)
    for run_id in ("p-done", "p-cancelled"):
        with pytest.raises(RunNotFoundError):
            await perdure_backend.get_run(run_id)
        assert set(rows_of(run_id).values()) == {0}, rows_of(run_id)
        lines = (tmp_path / export_name(run_id)).read_text().splitlines()
        assert json.loads(lines[0])["run"]["run_id"] == run_id
    waiting = await perdure_backend.get_run("p-waiting")
    assert waiting.status is RunStatus.SUSPENDED
    assert rows_of("p-waiting")["perdure_dbos_runs"] == 1
    # and it still takes its answer and finishes
    await perdure_backend.signal("p-waiting", perdure.APPROVAL, {"approved": False}, by="ops")
    assert (await perdure_backend.wait("p-waiting", timeout=60)).status is RunStatus.SUCCEEDED
