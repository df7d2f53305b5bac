"""perdure's runs table next to DBOS's: a table from an older perdure gains new columns."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from perdure_dbos._backend import runtime
from perdure_dbos._tables import located


async def test_a_runs_table_without_a_newer_column_gains_it_at_launch(
    perdure_backend: Any,
) -> None:
    marks = runtime().marks
    schema, table = located(marks.engine, marks.table)
    with marks.engine.begin() as c:  # the table as perdure created it before `details`
        c.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN details"))

    def columns() -> set[str]:
        found = sa.inspect(marks.engine).get_columns("perdure_dbos_runs", schema=schema)
        return {c["name"] for c in found}

    assert "details" not in columns()
    marks.create()  # what launching does
    assert "details" in columns()
    marks.insert("r-old", "wf", None, None, {"traceparent": "00-ab-cd-01"})
    mark = marks.get("r-old")
    assert mark is not None and mark.details == {"traceparent": "00-ab-cd-01"}
