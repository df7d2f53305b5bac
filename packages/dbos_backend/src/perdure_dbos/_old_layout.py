"""The first perdure-dbos layout (``perdure_runs``, steps stored as envelopes) is refused.

That layout's DBOS workflow had the same name, ``perdure_run``, but recorded each step
as an envelope this backend does not read as history: an unfinished run of it, recovered
by DBOS at launch, would replay an empty history and execute its steps again. So before
DBOS launches (and recovers anything), a system database holding unfinished runs of that
layout is refused with ``OldLayoutError`` saying what to do. Finished ones are harmless.
"""

from __future__ import annotations

import sqlalchemy as sa

from perdure.spi import ConfigurationError

#: The runs table of the first layout (this one's is ``perdure_dbos_runs``).
OLD_TABLE = "perdure_runs"


class OldLayoutError(ConfigurationError):
    """DBOS's system database holds unfinished runs of the first perdure-dbos layout."""


def check_no_unfinished_old_runs(system_database_url: str, schema: str | None) -> None:
    """Raise ``OldLayoutError`` if the database has unfinished runs in the old layout."""
    url = system_database_url
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        schema = schema or "dbos"
    engine = sa.create_engine(url)
    try:
        if not sa.inspect(engine).has_table(OLD_TABLE, schema=schema):
            return
        meta = sa.MetaData(schema=schema)
        old = sa.Table(OLD_TABLE, meta, sa.Column("run_id", sa.Text))
        status = sa.Table("workflow_status", meta, sa.Column("workflow_uuid"), sa.Column("status"))
        query = (
            sa.select(old.c.run_id)
            .join(status, status.c.workflow_uuid == old.c.run_id)
            .where(status.c.status.in_(["PENDING", "ENQUEUED", "DELAYED"]))
            .limit(5)
        )
        with engine.connect() as c:
            unfinished = [str(r[0]) for r in c.execute(query)]
    finally:
        engine.dispose()
    if unfinished:
        where = f"schema {schema!r}" if schema else "the SQLite file"
        raise OldLayoutError(
            f"DBOS's system database ({where}) holds unfinished runs of the first "
            f"perdure-dbos layout (table {OLD_TABLE}: {', '.join(unfinished)}"
            f"{', ...' if len(unfinished) == 5 else ''}), which this version cannot replay: "
            "finish them with the perdure-dbos that started them, or cancel them "
            "(`dbos workflow cancel ID`); then this version opens the database (their "
            f"finished records stay readable; drop {OLD_TABLE} when no longer wanted)"
        )
