"""The substrate goes away mid-run and comes back: a PostgreSQL cluster of the test's
own is stopped and started, a Temporal dev server (``--db-filename``) is restarted on the
same port, the SQLite file is locked by another process for longer than the store's
busy timeout (so writes fail). Workers ride it out: none lost, none duplicated, none
failed, all finished once it is back; the time from its return to the first step that
ran after is measured (``Tally.resumed_after``).

Never the shared PostgreSQL on 5432: the cluster is created on a free port and dropped.
If the cluster tools are missing the test fails (it never skips).
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from perdure._registry import open_backend
from perdure.testing import Processes, Receiver
from perdure.testing.chaos import Chaos, Outage, Tally
from perdure.testing.plugin import store_names

#: How long the PostgreSQL and Temporal outages last: the fault itself, not a wait.
OUTAGE_SECONDS = 2.0
#: How long each column's SQLite connections wait for a lock before a write fails
#: (PRAGMA busy_timeout: perdure's store, DBOS's system database).
SQLITE_BUSY_SECONDS = {"sqlite": 10.0, "dbos+sqlite": 30.0}
RUNS = 2


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each scenario runs on its columns that PERDURE_TEST_STORES selects."""
    marker = metafunc.definition.get_closest_marker("restarts")
    if marker is not None and "column" in metafunc.fixturenames:
        metafunc.parametrize("column", [c for c in store_names() if c in marker.args])


def on_column(column: str, url: str) -> str:
    """``url`` of a substrate as the column's backend names it (DBOS's: ``dbos+...``)."""
    return f"dbos+{url}" if column.startswith("dbos+") else url


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ctl(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stdout}{done.stderr}"


@pytest.fixture
def own_postgres() -> Iterator[tuple[str, str]]:
    """A PostgreSQL 15 cluster of this test only (trust auth, a free port); dropped."""
    name, port = f"perdure_{uuid.uuid4().hex[:8]}", free_port()
    ctl("pg_createcluster", "15", name, "-p", str(port), "--", "--auth=trust")
    try:
        ctl("pg_ctlcluster", "--skip-systemctl-redirect", "15", name, "start")
        yield name, f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            ["pg_dropcluster", "--stop", "15", name], capture_output=True, timeout=120, check=False
        )


def first_connection(url: str) -> float:
    """When ``url``'s server first accepts a connection (it is starting up)."""
    import psycopg

    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return time.time()
        except psycopg.OperationalError:
            time.sleep(0.01)  # the probe's pace while the server is still starting


@pytest.fixture
def tests_folder(request: pytest.FixtureRequest) -> Path:
    return Path(str(request.path)).parent


async def chaos_with_outage(
    url: str, receiver: Receiver, folder: Path, column: str, outage: Outage
) -> Tally:
    processes = Processes(url, env={"PERDURE_TEST_RECEIVER": receiver.url}, pythonpath=[folder])
    backend = open_backend(url)
    await backend.open()
    try:
        chaos = Chaos(backend, receiver, processes, column=column)
        tally = await chaos.run(runs=RUNS, kills=1, scenario="restart", outage=outage)
    finally:
        await backend.close()
        processes.close()
    tally.record()
    print(tally)
    return tally


def assert_rode_it_out(tally: Tally, *, logged: bool = True) -> None:
    assert tally.ok(), tally
    assert tally.in_flight_at_outage > 0, "the outage found no run in flight"
    assert tally.resumed_after is not None, tally
    if logged:  # SQLite's drives log it once (a pool or a client may wait it out inside)
        assert tally.outage_logged, "no driving process noticed the outage"


@pytest.mark.restarts("postgresql", "dbos+postgresql")
async def test_a_postgresql_restart_mid_run(
    column: str, own_postgres: tuple[str, str], receiver: Receiver, tests_folder: Path
) -> None:
    name, server = own_postgres

    async def restart() -> float:
        await asyncio.to_thread(
            ctl, "pg_ctlcluster", "--skip-systemctl-redirect", "15", name, "stop", "-m", "fast"
        )
        await asyncio.sleep(OUTAGE_SECONDS)  # the outage itself
        starting = asyncio.ensure_future(
            asyncio.to_thread(
                ctl, "pg_ctlcluster", "--skip-systemctl-redirect", "15", name, "start"
            )
        )
        # The server is back when it takes a connection, which on a loaded machine is
        # seconds before pg_ctlcluster returns: measure from then, not from the tool.
        back = await asyncio.to_thread(first_connection, server)
        await starting
        return back

    url = on_column(column, server)
    tally = await chaos_with_outage(url, receiver, tests_folder, column, restart)
    assert_rode_it_out(tally, logged=False)


@pytest.mark.restarts("sqlite", "dbos+sqlite")
async def test_the_sqlite_file_locked_by_another_process_mid_run(
    column: str, tmp_path: Path, receiver: Receiver, tests_folder: Path
) -> None:
    path = tmp_path / "perdure.db"
    url = on_column(column, f"sqlite:///{path}")

    def hold_the_write_lock() -> float:
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            # Twice the workers' busy timeout: every write they begin in the first half
            # fails, not just waits (with a small margin a loaded machine's drives could
            # all begin their writes late and slip through: nothing to ride out).
            time.sleep(2 * SQLITE_BUSY_SECONDS[column])  # the outage itself
            holder.execute("ROLLBACK")
            return time.time()
        finally:
            holder.close()

    async def lock() -> float:
        return await asyncio.to_thread(hold_the_write_lock)

    assert_rode_it_out(await chaos_with_outage(url, receiver, tests_folder, column, lock))


@pytest.fixture
async def own_temporal(tmp_path: Path) -> AsyncIterator[Any]:
    from perdure_temporal.devserver import DevServer

    server = DevServer(port=free_port(), db_file=tmp_path / "temporal.db")
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@pytest.mark.restarts("temporal")
async def test_a_temporal_server_restart_mid_run(
    column: str, own_temporal: Any, tmp_path: Path, receiver: Receiver, tests_folder: Path
) -> None:
    tag = uuid.uuid4().hex[:12]
    url = own_temporal.url(task_queue=f"t-{tag}", id_prefix=f"{tag}-", payloads=str(tmp_path / "p"))

    async def restart() -> float:
        await asyncio.to_thread(own_temporal.stop)
        await asyncio.sleep(OUTAGE_SECONDS)  # the outage itself
        await asyncio.to_thread(own_temporal.start)
        return time.time()

    tally = await chaos_with_outage(url, receiver, tests_folder, column, restart)
    assert_rode_it_out(tally, logged=False)
