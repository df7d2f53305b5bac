"""Substrate faults under the embedded engine, on every real store column.

A transient store error never reaches the workflow's code and never fails the run: the
drive unwinds and is driven again once the store answers. Permanent errors and
unreadable records park the run naming what and where. Errors are classified from the
real drivers' exceptions (a read-only SQLite file, a lock held by another connection,
a terminated PostgreSQL backend, a missing table).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fault_workflows as fw
import psycopg
import pytest

import perdure
from perdure import EventKind, NeedsAttentionError, RunStatus
from perdure._engine.backend import EmbeddedBackend
from perdure._errors import BackendUnavailableError, SubstrateError, classify
from perdure._registry import open_backend
from perdure._store import Store
from perdure._stores.faults import postgres_error, sqlite_error
from perdure._stores.sqlite import SqliteStore
from perdure.testing.plugin import DEFAULT_POSTGRES, store_factory, store_names

PG = os.environ.get("PERDURE_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
#: The columns whose store these tests wrap and corrupt directly. DBOS runs on its own
#: engine (not a Store); Temporal's store is being rebuilt by its own engineer.
EMBEDDED = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "embedded_store" in metafunc.fixturenames:
        names = [s for s in store_names() if s in EMBEDDED]
        metafunc.parametrize("embedded_store", names)
    if "postgres_column" in metafunc.fixturenames:  # selected like every other column
        metafunc.parametrize("postgres_column", [s for s in store_names() if s == "postgresql"])


@pytest.fixture
def perdure_url(embedded_store: str, tmp_path: Path) -> Iterator[str]:
    with store_factory(embedded_store)(tmp_path) as url:
        yield url


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    fw.reset()
    yield
    fw.reset()


class Flaky:
    """Wraps a real store; the next ``fail`` calls of method ``name`` raise ``error``
    before reaching it (the substrate said no), the rest pass through."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failing: dict[str, tuple[int, BaseException]] = {}

    def fail(self, name: str, times: int, error: BaseException) -> None:
        self.failing[name] = (times, error)

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._store, name)
        if name not in self.failing:
            return real

        async def call(*args: Any, **kwargs: Any) -> Any:
            times, error = self.failing[name]
            if times > 0:
                self.failing[name] = (times - 1, error)
                raise error
            return await real(*args, **kwargs)

        return call


async def backend_on(url: str) -> tuple[EmbeddedBackend, Flaky]:
    backend = open_backend(url)
    assert isinstance(backend, EmbeddedBackend)
    await backend.open()
    flaky = Flaky(backend.store)
    backend.store = flaky  # type: ignore[assignment]
    return backend, flaky


# -- classification of real driver errors -----------------------------------------------


def test_sqlite_errors_are_classified(tmp_path: Path) -> None:
    """Read-only and busy are transient, a missing table permanent."""
    path = tmp_path / "c.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.Error) as read_only:
        ro.execute("INSERT INTO t VALUES (1)")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.Error) as busy:
        sqlite3.connect(path, timeout=0).execute("INSERT INTO t VALUES (1)")
    holder.execute("ROLLBACK")
    with pytest.raises(sqlite3.Error) as missing:
        ro.execute("SELECT * FROM no_such_table")
    assert isinstance(sqlite_error(read_only.value, "c.db"), BackendUnavailableError)
    assert isinstance(sqlite_error(busy.value, "c.db"), BackendUnavailableError)
    permanent = sqlite_error(missing.value, "c.db")
    assert isinstance(permanent, SubstrateError)
    assert "no_such_table" in str(permanent) and "c.db" in str(permanent)


def test_postgresql_errors_are_classified(postgres_column: str) -> None:
    """A terminated or refused connection is transient, a missing table permanent."""
    with psycopg.connect(PG, autocommit=True) as victim, psycopg.connect(PG) as admin:
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.Error) as terminated:
            victim.execute("SELECT 1")
    with psycopg.connect(PG, autocommit=True) as conn, pytest.raises(psycopg.Error) as missing:
        conn.execute("SELECT * FROM no_such_table_here")
    with pytest.raises(psycopg.Error) as refused:
        psycopg.connect("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2)
    assert classify(postgres_error(terminated.value, "db")) == "transient"
    assert classify(postgres_error(refused.value, "db")) == "transient"
    permanent = postgres_error(missing.value, "127.0.0.1:5432/test")
    assert classify(permanent) == "permanent"
    assert "42P01" in str(permanent) and "127.0.0.1:5432/test" in str(permanent)


async def test_a_store_on_a_locked_sqlite_file_raises_the_typed_transient_error(
    tmp_path: Path,
) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}")
    await store.open()
    holder = sqlite3.connect(tmp_path / "l.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    assert store._db is not None
    store._db.execute("PRAGMA busy_timeout = 0")
    try:
        with pytest.raises(BackendUnavailableError, match=r"l\.db.*locked"):
            await store.renew("someone", 30, now=0)
    finally:
        holder.execute("ROLLBACK")
        await store.close()


def test_classifiers_of_other_backends_plug_in() -> None:
    class SdkTimeout(Exception):
        pass

    def sdk(exc: BaseException) -> Any:
        return "transient" if isinstance(exc, SdkTimeout) else None

    perdure._errors.register_classifier(sdk)
    wrapped = RuntimeError("update failed")
    wrapped.__cause__ = SdkTimeout()
    assert classify(wrapped) == "transient"
    assert classify(ValueError("user code")) is None


# -- the engine under faults --------------------------------------------------------------


async def test_a_transient_error_writing_a_step_never_reaches_the_workflow(
    perdure_url: str,
) -> None:
    backend, flaky = await backend_on(perdure_url)
    try:
        # The write of first's result fails twice: the store is away for a moment.
        flaky.fail("append", 2, BackendUnavailableError("the store went away"))
        handle = await backend.start(fw.guarded, (1,), {}, run_id="r-transient")
        result = await handle.result(timeout=60)
    finally:
        await backend.close()
    assert result == {"a": 2, "b": "sent-2"}
    assert fw.SWALLOWED == []  # the workflow's own except Exception never saw it
    assert fw.CALLS["first"] == 1  # run once: its unrecorded result was carried over


async def test_a_transient_error_after_a_non_idempotent_effect_does_not_park_the_run(
    perdure_url: str,
) -> None:
    backend, flaky = await backend_on(perdure_url)
    try:
        handle = await backend.start(fw.guarded, (1,), {}, run_id="r-effect")
        await handle.result(timeout=60)
        flaky.fail("append", 3, BackendUnavailableError("connection reset"))
        # run_started, first (completed), send: intent then its completion fail.
        handle = await backend.start(fw.guarded, (5,), {}, run_id="r-effect-2")
        info = await backend.wait("r-effect-2", timeout=60)
        history = await backend.history("r-effect-2")
    finally:
        await backend.close()
    assert info.status is RunStatus.SUCCEEDED, info.attention
    assert info.result == {"a": 6, "b": "sent-6"}
    assert fw.SWALLOWED == []
    assert [e.kind for e in history].count(EventKind.NEEDS_ATTENTION) == 0


async def test_a_permanent_store_error_parks_the_run_naming_it(perdure_url: str) -> None:
    backend, flaky = await backend_on(perdure_url)
    try:
        flaky.fail("load_history", 1, SubstrateError("PostgreSQL at h/db: permission denied"))
        handle = await backend.start(fw.guarded, (1,), {}, run_id="r-permanent")
        with pytest.raises(NeedsAttentionError) as caught:
            await handle.result(timeout=60)
        info = await backend.get_run("r-permanent")
    finally:
        await backend.close()
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "SubstrateError"
    assert "permission denied" in info.attention["message"]
    assert "None" not in str(caught.value) and "perdure resume" in str(caught.value)
    assert fw.CALLS["first"] == 0


async def test_a_wrongly_shaped_stored_result_parks_the_run_naming_the_step(
    perdure_url: str,
) -> None:
    backend, _ = await backend_on(perdure_url)
    try:
        handle = await backend.start(fw.two_slow, (1,), {}, run_id="r-shape")
        await fw.STARTED.wait()
        fw.RELEASE.set()
        await handle.result(timeout=60)
        # Replace the recorded outcome of step 1 with JSON of the wrong shape.
        events = await backend.history("r-shape")
        seq = next(e.seq for e in events if e.kind is EventKind.STEP_COMPLETED)
        store: Any = backend.store
        inner = store._store
        if hasattr(inner, "_db"):
            inner._db.execute("UPDATE events SET data = '[1, 2]' WHERE seq = ?", (seq,))
        else:
            async with inner._conn() as conn:
                await conn.execute(
                    f'UPDATE "{inner.schema}".events SET data = %s WHERE seq = %s'.encode(),
                    ("[1, 2]", seq),
                )
        await backend.store.admin_append(
            "r-shape", [], expect=(RunStatus.SUCCEEDED,), status=RunStatus.SUSPENDED, now=0
        )
        info = await backend.wait("r-shape", timeout=60)
    finally:
        await backend.close()
    assert info.status is RunStatus.NEEDS_ATTENTION
    assert info.attention is not None
    assert info.attention["reason"] == "CorruptHistoryError"
    assert info.attention["seq"] == seq
    assert info.attention["step_key"] == "1:slow"


async def test_twenty_concurrent_first_starts_open_one_backend(perdure_url: str) -> None:
    try:
        handles = await asyncio.gather(
            *(
                perdure.start(fw.guarded, i, run_id=f"r-first-{i}", url=perdure_url)
                for i in range(20)
            )
        )
        backends = {id(h.backend) for h in handles}
        for h in handles:
            await h.result(timeout=60)
    finally:
        await perdure.shutdown()
    assert len(backends) == 1


async def test_shutdown_lets_the_step_in_flight_record_then_releases_the_run(
    perdure_url: str,
) -> None:
    backend = open_backend(perdure_url)
    await backend.start(fw.two_slow, (3,), {}, run_id="r-drain")
    await fw.STARTED.wait()
    closing = asyncio.ensure_future(backend.shutdown(grace=30))
    await backend.draining.wait()  # the drain has begun while the step is in flight
    fw.RELEASE.set()
    await closing
    other = open_backend(perdure_url)
    await other.open()
    try:
        info = await other.get_run("r-drain")
        assert info.owner is None  # released: no lease to wait out
        steps = [
            e.step_key for e in await other.history("r-drain") if e.kind is EventKind.STEP_COMPLETED
        ]
        assert steps == ["1:slow"]  # the step in flight finished and was recorded
        info = await other.wait("r-drain", timeout=60)  # taken over at once
    finally:
        await other.close()
    assert info.status is RunStatus.SUCCEEDED and info.result == 4
    assert fw.CALLS["slow"] == 1
