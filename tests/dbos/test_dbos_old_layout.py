"""A system database holding unfinished runs of the first perdure-dbos layout (table
``perdure_runs``) is refused before DBOS launches, with a typed error saying what to do;
once they are finished (here: cancelled through DBOS) it opens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from perdure import RunStatus
from perdure_dbos import DbosBackend, DbosUrl
from perdure_dbos._compat import system_engine, system_tables
from perdure_dbos._old_layout import OldLayoutError


async def test_unfinished_runs_of_the_old_layout_are_refused_until_finished(
    perdure_backend: Any, perdure_url: str, flows: Any
) -> None:
    await perdure_backend.start(flows.approval, ("old",), {}, run_id="r-old")
    await perdure_backend.idle()
    # What the first layout left: its runs table beside DBOS's, naming the run.
    old = sa.Table(
        "perdure_runs",
        sa.MetaData(schema=system_tables().workflow_status.schema),
        sa.Column("run_id", sa.Text, primary_key=True),
    )
    engine = system_engine()
    old.create(engine)
    with engine.begin() as c:
        c.execute(sa.insert(old).values(run_id="r-old"))
    await perdure_backend.close()

    with pytest.raises(OldLayoutError, match=r"perdure_runs: r-old\).*dbos workflow cancel"):
        await DbosBackend(perdure_url).open()

    # The operator cancels it with DBOS's own CLI, as the error says; then it opens.
    parsed = DbosUrl.parse(perdure_url)
    where = ["-s", parsed.system_database_url]
    if parsed.schema:
        where += ["--schema", parsed.schema]
    dbos = str(Path(sys.executable).parent / "dbos")
    done = subprocess.run(
        [dbos, "workflow", "cancel", "r-old", *where], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    async with DbosBackend(perdure_url) as again:
        assert (await again.get_run("r-old")).status is RunStatus.CANCELLED
