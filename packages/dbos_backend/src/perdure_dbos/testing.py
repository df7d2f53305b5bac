"""URL factories and the history corrupter of the DBOS stores for perdure's pytest plugin
(entry-point groups ``perdure.test_stores`` and ``perdure.test_corrupters``)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from pathlib import Path

from perdure.testing.plugin import postgresql_url


@contextlib.contextmanager
def dbos_sqlite_url(tmp_path: Path) -> Generator[str]:
    """A fresh DBOS system database in a temporary SQLite file."""
    yield f"dbos+sqlite:///{tmp_path / 'dbos.db'}"


@contextlib.contextmanager
def dbos_postgresql_url(tmp_path: Path) -> Generator[str]:
    """A fresh PostgreSQL schema for DBOS's system tables, dropped afterwards."""
    with postgresql_url(tmp_path) as url:
        yield f"dbos+{url}"


def corrupt_step(url: str, run_id: str, seq: int) -> None:
    """Overwrite the DBOS step row that records history event ``seq`` of ``run_id`` with
    text that is not JSON, behind DBOS's back: the corrupter of both DBOS stores
    (entry-point group ``perdure.test_corrupters``) for the conformance scenario on
    corrupt history rows. Seq 0 (the input) is the workflow's own row, not a step."""
    import json

    import sqlalchemy as sa

    from perdure_dbos._backend import DbosUrl

    parsed = DbosUrl.parse(url)
    system = parsed.system_database_url
    schema = parsed.schema
    if system.startswith("postgresql://"):
        system = "postgresql+psycopg://" + system.removeprefix("postgresql://")
        schema = schema or "dbos"
    engine = sa.create_engine(system)
    try:
        table = sa.Table("operation_outputs", sa.MetaData(schema=schema), autoload_with=engine)
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(table.c.function_id, table.c.output)
                .where(table.c.workflow_uuid == run_id)
                .order_by(table.c.function_id)
            ).all()
            seen = 0
            for function_id, output in rows:
                try:
                    record = json.loads(output) if output else None
                except ValueError:  # corrupted before: it still stands for its events
                    record = {"events": [None]}
                if not isinstance(record, dict) or "events" not in record:
                    continue
                seen += len(record["events"])  # pyright: ignore[reportUnknownArgumentType]
                if seen >= seq:
                    conn.execute(
                        sa.update(table)
                        .where(table.c.workflow_uuid == run_id, table.c.function_id == function_id)
                        .values(output="{not json")
                    )
                    return
    finally:
        engine.dispose()
    raise LookupError(f"{url}: run {run_id!r} has no DBOS step recording event #{seq}")
