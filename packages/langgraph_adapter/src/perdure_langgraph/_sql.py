"""SQL for the checkpointer's own tables (prefix ``lg_``), in the SQLite and PostgreSQL dialects.

Statements are written once with ``%s`` placeholders and a few dialect fragments:

* ``{p}``        table prefix (``"schema".`` on PostgreSQL, empty on SQLite)
* ``{json}``     a JSON parameter (``%s::jsonb`` / ``%s``)
* ``{in_arr}``   ``IN <array parameter>`` (``= ANY(%s::text[])`` / ``IN (json_each(?))``)
* ``{pairs}``    a subquery of ``(a, b)`` rows from one array-of-pairs parameter
* ``{triples}``  the same for ``(a, b, c)`` rows

Array parameters go through :meth:`Dialect.arr` / :meth:`Dialect.rows`, which turn Python
lists into what each driver binds (PostgreSQL arrays, or JSON text for SQLite).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Checkpoint columns, in the order every checkpoint SELECT returns them.
CHECKPOINT_COLS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata, "
    "base_id"
)
WRITE_COLS = "thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob"

SQLITE_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS lg_checkpoints (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            run_id TEXT,
            delta_channels INTEGER NOT NULL DEFAULT 0,
            base_id TEXT,
            type TEXT NOT NULL,
            checkpoint BLOB NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        """CREATE TABLE IF NOT EXISTS lg_blobs (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE IF NOT EXISTS lg_writes (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT NOT NULL DEFAULT '',
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
    ),
)

POSTGRES_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE IF NOT EXISTS {p}lg_checkpoints (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            run_id TEXT,
            delta_channels BOOLEAN NOT NULL DEFAULT false,
            base_id TEXT,
            type TEXT NOT NULL,
            checkpoint BYTEA NOT NULL,
            metadata JSONB NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        """CREATE TABLE IF NOT EXISTS {p}lg_blobs (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE IF NOT EXISTS {p}lg_writes (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT NOT NULL DEFAULT '',
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
    ),
)


@dataclass(frozen=True)
class Dialect:
    """The SQL fragments and parameter encodings of one database."""

    name: str
    prefix: str
    fragments: dict[str, str] = field(default_factory=dict)
    qmark: bool = False

    def sql(self, template: str) -> str:
        """Expand the dialect fragments in ``template`` (and turn ``%s`` into ``?`` on SQLite)."""
        text = template.format(p=self.prefix, **self.fragments)
        return text.replace("%s", "?") if self.qmark else text

    def arr(self, values: Sequence[str]) -> Any:
        """Bind a list of strings for ``{in_arr}``."""
        return json.dumps(list(values)) if self.qmark else list(values)

    def rows(self, rows: Sequence[Sequence[str]], width: int) -> tuple[Any, ...]:
        """Bind a list of tuples for ``{pairs}`` (width 2) or ``{triples}`` (width 3)."""
        if self.qmark:
            return (json.dumps([list(r) for r in rows]),)
        return tuple([r[i] for r in rows] for i in range(width))

    @property
    def is_postgres(self) -> bool:
        """Whether this is the PostgreSQL dialect."""
        return not self.qmark


def _json_rows(width: int) -> str:
    cols = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(width))
    return f"SELECT {cols} FROM json_each(%s)"


SQLITE = Dialect(
    name="sqlite",
    prefix="",
    qmark=True,
    fragments={
        "json": "%s",
        "in_arr": "IN (SELECT value FROM json_each(%s))",
        "pairs": _json_rows(2),
        "triples": _json_rows(3),
        "true": "1",
    },
)


def postgres_dialect(schema: str) -> Dialect:
    """The PostgreSQL dialect with tables in ``schema``."""
    return Dialect(
        name="postgresql",
        prefix=f'"{schema}".',
        fragments={
            "json": "%s::jsonb",
            "in_arr": "= ANY(%s::text[])",
            "pairs": "SELECT * FROM unnest(%s::text[], %s::text[])",
            "triples": "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])",
            "true": "true",
        },
    )


# ---------------------------------------------------------------- statements

_CHECKPOINT_UPSERT = """
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    run_id = excluded.run_id,
    delta_channels = excluded.delta_channels,
    base_id = excluded.base_id,
    type = excluded.type,
    checkpoint = excluded.checkpoint,
    metadata = excluded.metadata
"""
_CHECKPOINT_INTO = """
INSERT INTO {p}lg_checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, delta_channels,
     base_id, type, checkpoint, metadata)
"""
_BASE_IS_FULL = """EXISTS (
    SELECT 1 FROM {p}lg_checkpoints b
    WHERE b.thread_id = %s AND b.checkpoint_ns = %s AND b.checkpoint_id = %s
    AND b.base_id IS NULL)"""

#: A checkpoint stored whole.
INSERT_CHECKPOINT = (
    _CHECKPOINT_INTO + "VALUES (%s, %s, %s, %s, %s, %s, NULL, %s, %s, {json})" + _CHECKPOINT_UPSERT
)
#: A checkpoint stored as a delta against its base, if the base is still there (the row
#: comes back; if it does not, the caller stores the checkpoint whole).
INSERT_CHECKPOINT_DELTA = (
    _CHECKPOINT_INTO
    + "SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, {json} WHERE "
    + _BASE_IS_FULL
    + _CHECKPOINT_UPSERT
    + "RETURNING checkpoint_id"
)

#: Stores a delta checkpoint whole (before its base goes away).
MATERIALIZE = """
UPDATE {p}lg_checkpoints SET type = %s, checkpoint = %s, base_id = NULL
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

SELECT_BASES_FOR = """
SELECT checkpoint_ns, checkpoint_id, type, checkpoint FROM {p}lg_checkpoints
WHERE thread_id = %s AND base_id IS NULL AND (checkpoint_ns, checkpoint_id) IN ({pairs})
"""

INSERT_BLOB = """
INSERT INTO {p}lg_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
"""

_INSERT_WRITE = """
INSERT INTO {p}lg_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) """

#: Special writes (errors, interrupts, ...) replace what is there: last one wins.
UPSERT_WRITE = (
    _INSERT_WRITE
    + """DO UPDATE SET
    task_path = excluded.task_path,
    channel = excluded.channel,
    type = excluded.type,
    blob = excluded.blob
"""
)
#: Ordinary writes are recorded once: a retried task cannot change what was saved.
INSERT_WRITE = _INSERT_WRITE + "DO NOTHING\n"

SELECT_CHECKPOINTS = f"SELECT {CHECKPOINT_COLS} FROM {{p}}lg_checkpoints"

SELECT_WRITES_FOR = f"""
SELECT {WRITE_COLS} FROM {{p}}lg_writes
WHERE (thread_id, checkpoint_ns, checkpoint_id) IN ({{triples}})
"""

SELECT_BLOBS_FOR = """
SELECT checkpoint_ns, channel, version, type, blob FROM {p}lg_blobs
WHERE thread_id = %s AND (checkpoint_ns, channel, version) IN ({triples})
"""

DELETE_THREAD = (
    "DELETE FROM {p}lg_checkpoints WHERE thread_id = %s",
    "DELETE FROM {p}lg_blobs WHERE thread_id = %s",
    "DELETE FROM {p}lg_writes WHERE thread_id = %s",
)

DELETE_THREADS = (
    "DELETE FROM {p}lg_checkpoints WHERE thread_id {in_arr}",
    "DELETE FROM {p}lg_blobs WHERE thread_id {in_arr}",
    "DELETE FROM {p}lg_writes WHERE thread_id {in_arr}",
)

COPY_THREAD = (
    """INSERT INTO {p}lg_checkpoints
        (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, delta_channels,
         base_id, type, checkpoint, metadata)
    SELECT %s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, delta_channels,
         base_id, type, checkpoint, metadata
    FROM {p}lg_checkpoints WHERE thread_id = %s
    ON CONFLICT DO NOTHING""",
    """INSERT INTO {p}lg_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %s, checkpoint_ns, channel, version, type, blob
    FROM {p}lg_blobs WHERE thread_id = %s
    ON CONFLICT DO NOTHING""",
    """INSERT INTO {p}lg_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob)
    SELECT %s, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob
    FROM {p}lg_writes WHERE thread_id = %s
    ON CONFLICT DO NOTHING""",
)

SELECT_DELTA_THREADS = """
SELECT DISTINCT thread_id FROM {p}lg_checkpoints
WHERE thread_id {in_arr} AND delta_channels = {true}
"""

SELECT_THREAD_INDEX = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id
FROM {p}lg_checkpoints WHERE thread_id = %s
"""

SELECT_METADATA_FOR = """
SELECT checkpoint_ns, checkpoint_id, metadata FROM {p}lg_checkpoints
WHERE thread_id = %s AND (checkpoint_ns, checkpoint_id) IN ({pairs})
"""

SELECT_HEADER = """
SELECT checkpoint_id, base_id, type, checkpoint FROM {p}lg_checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

SELECT_HEADERS = """
SELECT checkpoint_id, parent_checkpoint_id, base_id, type, checkpoint FROM {p}lg_checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s
"""

#: Serializes a thread's writers against its maintenance (PostgreSQL).
LOCK_THREAD_SHARED = "SELECT pg_advisory_xact_lock_shared(%s)"
LOCK_THREAD = "SELECT pg_advisory_xact_lock(%s)"

SELECT_BLOB_KEYS = """
SELECT channel, version FROM {p}lg_blobs WHERE thread_id = %s AND checkpoint_ns = %s
"""

DELETE_NAMESPACES = (
    "DELETE FROM {p}lg_checkpoints WHERE thread_id = %s AND checkpoint_ns {in_arr}",
    "DELETE FROM {p}lg_blobs WHERE thread_id = %s AND checkpoint_ns {in_arr}",
    "DELETE FROM {p}lg_writes WHERE thread_id = %s AND checkpoint_ns {in_arr}",
)

DELETE_CHECKPOINTS_IN = """
DELETE FROM {p}lg_checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id {in_arr}
"""

DELETE_WRITES_IN = """
DELETE FROM {p}lg_writes
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id {in_arr}
"""

DELETE_BLOBS_IN = """
DELETE FROM {p}lg_blobs
WHERE thread_id = %s AND checkpoint_ns = %s AND (channel, version) IN ({pairs})
"""

SET_PARENT = """
UPDATE {p}lg_checkpoints SET parent_checkpoint_id = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""

SELECT_RUN_CHECKPOINTS = """
SELECT DISTINCT thread_id, checkpoint_ns FROM {p}lg_checkpoints WHERE run_id {in_arr}
"""

SELECT_RUN_IDS_IN_NS = """
SELECT checkpoint_id FROM {p}lg_checkpoints
WHERE thread_id = %s AND checkpoint_ns = %s AND run_id {in_arr}
"""
