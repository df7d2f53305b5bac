"""Payloads stored aside in PostgreSQL: one table every worker host shares.

``temporal://...?payloads=postgresql%3A%2F%2Fuser%40db%2Fapp%3Fschema%3Dperdure`` (the
``postgresql://`` URL percent-encoded, as any URL inside a query). Rows are keyed by
their SHA-256 like the directory store's files, so a write is idempotent and a read is
checked; ``written_at`` is refreshed by every write of the same bytes, which is what
``prune`` goes by.
"""

from __future__ import annotations

import hashlib
import threading
import time

from psycopg import Connection, sql
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from perdure.spi import mask_url, parse_postgres_url
from perdure_temporal.payloads import PayloadStore, verified


class PostgresPayloads(PayloadStore):
    """Payloads in ``<schema>.payloads`` of the database ``url`` names."""

    def __init__(self, url: str) -> None:
        conninfo, schema, pool_size = parse_postgres_url(url)
        self.schema = schema
        self._schema = sql.Identifier(schema)
        self._where = mask_url(url)
        self._pool: ConnectionPool[Connection[TupleRow]] = ConnectionPool(
            conninfo, min_size=0, max_size=pool_size, open=False
        )
        self._ready = False
        self._lock = threading.Lock()

    def __str__(self) -> str:
        return f"PostgreSQL {self._where} ({self.schema}.payloads)"

    def _connection(self) -> ConnectionPool[Connection[TupleRow]]:
        with self._lock:
            if not self._ready:
                self._pool.open()
                with self._pool.connection() as conn:
                    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self._schema))
                    conn.execute(
                        sql.SQL(
                            "CREATE TABLE IF NOT EXISTS {}.payloads ("
                            " key text PRIMARY KEY, data bytea NOT NULL,"
                            " written_at double precision NOT NULL)"
                        ).format(self._schema)
                    )
                self._ready = True
        return self._pool

    def put(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        with self._connection().connection() as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.payloads (key, data, written_at) VALUES (%s, %s, %s)"
                    " ON CONFLICT (key) DO UPDATE SET written_at = EXCLUDED.written_at"
                ).format(self._schema),
                (key, data, time.time()),
            )
        return key

    def get(self, key: str) -> bytes:
        with self._connection().connection() as conn:
            row = conn.execute(
                sql.SQL("SELECT data FROM {}.payloads WHERE key = %s").format(self._schema),
                (key,),
            ).fetchone()
        if row is None:
            raise KeyError(key)
        return verified(key, bytes(row[0]), self)

    def prune(self, *, older_than: float) -> int:
        """Delete payloads last written more than ``older_than`` seconds ago; return how
        many. Choose it longer than the namespace's retention plus the longest a run
        lives: a run still open may read any payload it ever wrote."""
        with self._connection().connection() as conn:
            cur = conn.execute(
                sql.SQL("DELETE FROM {}.payloads WHERE written_at < %s").format(self._schema),
                (time.time() - older_than,),
            )
            return cur.rowcount

    def close(self) -> None:
        self._pool.close()
