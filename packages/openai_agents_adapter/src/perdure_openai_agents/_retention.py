"""``perdure runs prune`` and a worker's retention delete the session items a run wrote.

A ``PerdureSession`` write inside a run carries the step's idempotency key,
``<run_id>:<step key>#<i>`` (``session.py``), and a pop records the key of the step that
popped; so the rows a pruned run wrote, and the rows it popped (hidden already), are
found by that prefix and deleted. A session is a conversation that may go on in later
runs: their items stay, and so do items written outside any run. Purged in the table on
the backend's SQL database (``registry.state_url``), where ``PerdureSession`` keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

from perdure.spi import Backend, ConfigurationError, RunInfo, state_url
from perdure_openai_agents.session import TABLE, _open_store, _Postgres, _Sqlite

__all__ = ["purge"]


async def purge(backend: Backend, runs: Sequence[RunInfo]) -> None:
    """Delete the session items written or popped by ``runs`` (about to be deleted)."""
    prefixes = sorted({f"{info.run_id}:" for info in runs})
    if not prefixes:
        return
    try:
        state_url(backend.url)
    except ConfigurationError:
        return  # a backend with no SQL database for adapters: no session can be on it
    store = _open_store(backend.url)
    try:
        if isinstance(store, _Sqlite):
            _purge_sqlite(store, prefixes)
        else:
            await _purge_postgres(store, prefixes)
    finally:
        await store.close()


def _purge_sqlite(store: _Sqlite, prefixes: list[str]) -> None:
    db = store._conn()  # pyright: ignore[reportPrivateUsage]
    # A prefix compared by length, not LIKE: a run id may hold % or _.
    db.execute("BEGIN IMMEDIATE")
    try:
        for prefix in prefixes:
            db.execute(
                f"DELETE FROM {TABLE} WHERE substr(write_key, 1, ?) = ? "
                "OR substr(popped_by, 1, ?) = ?",
                (len(prefix), prefix, len(prefix), prefix),
            )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


async def _purge_postgres(store: _Postgres, prefixes: list[str]) -> None:
    conn = await store._connection()  # pyright: ignore[reportPrivateUsage]
    async with conn.transaction(), conn.cursor() as cur:
        await cur.executemany(
            f"""DELETE FROM {store.table} WHERE left(write_key, %s) = %s
                OR left(popped_by, %s) = %s""".encode(),
            [(len(p), p, len(p), p) for p in prefixes],
        )
