"""The processes of ``benchmarks.dbos_steps``: ``python -m benchmarks._dbos_children PART
JSON`` runs one part in a fresh process (DBOS is one launched instance per process) and
prints its figures as one JSON line after ``FIGURES``.

Parts: ``steps`` (per-step timings, perdure-dbos and plain DBOS on one launched DBOS,
the embedded engine beside), ``tx`` (a phase of sequential runs, or the same time idle,
with commits and reads counted), ``idle`` (background commits per second with suspended runs
and a worker idle), ``hostb`` (starts a run as executor host-b and blocks in it until
SIGKILLed) and ``worker`` (a ``serve()`` worker, executor host-a, until stdin closes).

Commits are counted on SQLAlchemy's ``commit`` event of every engine in the process
(DBOS's system database engine carries DBOS's own writes and perdure's tables alike),
reads ended without a commit on its ``rollback`` event, and on PostgreSQL commits also
as the server counts them (``pg_stat_database.xact_commit``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import uuid
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer, SetWorkflowID
from sqlalchemy import event

import perdure
from benchmarks.dbos_steps import xact_commit

#: The step at which a blocking run blocks and a resumed one reports.
BLOCK_AT = 10
#: A wait with no timer in plain DBOS's recv (it needs a finite timeout).
FOREVER = 10 * 365 * 24 * 3600.0


class Commits:
    """Commits, rollbacks and SQL statements of every SQLAlchemy engine of this process,
    counted."""

    def __init__(self) -> None:
        self.commits = 0
        self.rollbacks = 0
        self.statements = 0
        self._lock = threading.Lock()
        event.listen(sa.engine.Engine, "commit", self._commit)
        event.listen(sa.engine.Engine, "rollback", self._rollback)
        event.listen(sa.engine.Engine, "before_cursor_execute", self._statement)

    def _statement(self, *_: Any) -> None:
        with self._lock:
            self.statements += 1

    def _commit(self, conn: Any) -> None:
        with self._lock:
            self.commits += 1

    def _rollback(self, conn: Any) -> None:
        with self._lock:
            self.rollbacks += 1

    def read(self) -> tuple[int, int]:
        with self._lock:
            return self.commits, self.rollbacks

    def read_statements(self) -> int:
        with self._lock:
            return self.statements


COMMITS = Commits()


def _at_step(i: int) -> int:
    if i == BLOCK_AT and os.environ.get("BENCH_BLOCK") == "1":
        print("BLOCKED", flush=True)
        sys.stdin.read()  # held until SIGKILL (the heartbeat thread beats meanwhile)
    if i == BLOCK_AT and os.environ.get("BENCH_RESUME") == "1":
        print(f"RESUMED {time.time():.6f}", flush=True)
    return i


@perdure.step
async def p_step(i: int) -> int:
    # async, as plain DBOS's step is: a sync step would add a thread hop per step
    return _at_step(i)


@perdure.workflow(name="bench_dbos_loop")
async def p_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += await p_step(i)
    return total


@perdure.workflow(name="bench_dbos_suspended")
async def p_suspended() -> None:
    await perdure.wait_for_signal("go")


@DBOS.step(name="plain_step")
async def plain_step(i: int) -> int:
    return _at_step(i)


@DBOS.workflow(name="plain_loop")
async def plain_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += await plain_step(i)
    return total


WAITING: list[str] = []


@DBOS.workflow(name="plain_suspended")
async def plain_suspended() -> None:
    WAITING.append(str(DBOS.workflow_id))  # in memory: only this process counts them
    await DBOS.recv_async("go", FOREVER)


def plain_launch(dbos_url: str) -> None:
    """Launch plain DBOS on a ``dbos+`` URL with the settings perdure launches it with
    (portable JSON, the same notification polling), so only perdure's work differs."""
    from perdure_dbos._backend import DbosUrl

    parsed = DbosUrl.parse(dbos_url)
    config: DBOSConfig = {
        "name": "plain",
        "system_database_url": parsed.system_database_url,
        "serializer": DBOSPortableJSONSerializer(),
        "notification_listener_polling_interval_sec": 0.05,
        "log_level": "WARNING",
        "enable_otlp": False,
    }
    if parsed.schema:
        config["dbos_system_schema"] = parsed.schema
    DBOS(config=config)
    DBOS.launch()


async def run_perdure(backend: perdure.Backend, n: int) -> float:
    """Seconds per step of one ``n``-step perdure run on ``backend``."""
    t0 = time.perf_counter()
    handle = await backend.start(p_loop, (n,), {}, run_id=f"steps-{uuid.uuid4().hex}")
    assert await handle.result() == sum(range(n))
    return (time.perf_counter() - t0) / n


async def run_plain(n: int) -> float:
    """Seconds per step of one ``n``-step plain DBOS workflow."""
    t0 = time.perf_counter()
    with SetWorkflowID(f"plain-{uuid.uuid4().hex}"):
        handle = await DBOS.start_workflow_async(plain_loop, n)
    assert await handle.get_result() == sum(range(n))
    return (time.perf_counter() - t0) / n


# -- parts ------------------------------------------------------------------------------


async def steps(a: dict[str, Any]) -> dict[str, Any]:
    """perdure-dbos and plain DBOS on one launched DBOS, and the embedded engine, round
    by round (one warm-up round first); seconds per step of each. The order of the two
    DBOS sides flips every round (ABBA...), so neither always runs first after the
    other's writes (a WAL checkpoint, a warm cache)."""
    ours: list[float] = []
    plain: list[float] = []
    embedded: list[float] = []
    dbos_backend = await perdure.connect(a["dbos_url"])
    embedded_backend = await perdure.connect(a["embedded_url"])
    try:
        for r in range(a["times"] + 1):
            if r % 2:
                o = await run_perdure(dbos_backend, a["n"])
                p = await run_plain(a["n"])
            else:
                p = await run_plain(a["n"])
                o = await run_perdure(dbos_backend, a["n"])
            e = await run_perdure(embedded_backend, a["n"])
            if r:
                plain.append(p)
                ours.append(o)
                embedded.append(e)
    finally:
        await perdure.shutdown()
    return {"perdure": ours, "plain": plain, "embedded": embedded}


async def tx(a: dict[str, Any]) -> dict[str, Any]:
    """One warm-up run, then ``runs`` sequential ``steps``-step runs (or, with no runs,
    ``idle`` seconds of nothing): the phase's seconds and commits."""
    kind, n = a["kind"], a["steps"]
    backend = None
    if kind == "plain":
        plain_launch(a["dbos_url"])
    else:
        backend = await perdure.connect(a["dbos_url"])

    async def one() -> None:
        if backend is None:
            await run_plain(n)
        else:
            await run_perdure(backend, n)

    await one()
    c0, r0 = COMMITS.read()
    s0 = COMMITS.read_statements()
    t0 = time.perf_counter()
    for _ in range(a["runs"]):
        await one()
    if not a["runs"]:
        await asyncio.sleep(a["idle"])
    seconds = time.perf_counter() - t0
    c1, r1 = COMMITS.read()
    s1 = COMMITS.read_statements()
    if backend is None:
        DBOS.destroy()
    else:
        await perdure.shutdown()
    return {"seconds": seconds, "commits": c1 - c0, "rollbacks": r1 - r0, "statements": s1 - s0}


async def serving() -> None:
    """Return once ``serve`` made this process a worker: it relaunches DBOS listening to
    the recovery queue, and a run started before that would be drained by it."""
    from perdure_dbos import _backend

    def listening() -> bool:
        rt = _backend._runtime  # pyright: ignore[reportPrivateUsage]
        return rt is not None and rt.listening

    while not listening():
        await asyncio.sleep(0.01)


async def _suspend_perdure(backend: perdure.Backend, have: int, want: int) -> None:
    for i in range(have, want):
        await backend.start(p_suspended, (), {}, run_id=f"suspended-{i}")
    await backend.idle()  # type: ignore[attr-defined]


async def _suspend_plain(have: int, want: int) -> None:
    for i in range(have, want):
        with SetWorkflowID(f"plain-suspended-{i}"):
            await DBOS.start_workflow_async(plain_suspended)
    while len(WAITING) < want:
        await asyncio.sleep(0.05)


async def idle(a: dict[str, Any]) -> dict[str, Any]:
    """For each count of suspended runs (waiting for a signal), the commits per second
    over a ``window`` with nothing else to do; perdure with a worker (``serve``) idle."""
    kind = a["kind"]
    backend = None
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    if kind == "plain":
        plain_launch(a["dbos_url"])
    else:
        backend = await perdure.connect(a["dbos_url"])
        tasks.append(asyncio.create_task(backend.serve(stop=stop)))
        await serving()
    out: dict[str, Any] = {}
    have = 0
    for want in a["counts"]:
        if backend is None:
            await _suspend_plain(have, want)
        else:
            await _suspend_perdure(backend, have, want)
        have = want
        await asyncio.sleep(a["settle"])  # the last runs' writes after their stop
        c0, r0 = COMMITS.read()
        x0 = xact_commit(a.get("admin_url"), a.get("database"))
        t0 = time.perf_counter()
        await asyncio.sleep(a["window"])
        seconds = time.perf_counter() - t0
        c1, r1 = COMMITS.read()
        x1 = xact_commit(a.get("admin_url"), a.get("database"))
        out[str(want)] = {
            "engine_per_s": (c1 - c0) / seconds,
            "reads_per_s": (r1 - r0) / seconds,
            "server_per_s": None if x0 is None or x1 is None else (x1 - x0) / seconds,
        }
    print("FIGURES " + json.dumps(out), flush=True)
    os._exit(0)  # the suspended runs stay PENDING in a schema dropped after


async def hostb(a: dict[str, Any]) -> dict[str, Any]:
    """Start the run here (this process's executor id: host-b's) and block in it."""
    backend = await perdure.connect(a["dbos_url"])
    await backend.start(p_loop, (a["steps"],), {}, run_id=a["run_id"])
    await backend.wait(a["run_id"])
    raise AssertionError("the host-b run was to block until SIGKILL")


async def worker(a: dict[str, Any]) -> dict[str, Any]:
    """A worker (``serve``) until stdin closes."""
    backend = await perdure.connect(a["dbos_url"])
    stop = asyncio.Event()
    server = asyncio.create_task(backend.serve(stop=stop))
    await serving()
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stop.set()
    await server
    await perdure.shutdown(grace=1.0)
    return {}


PARTS = {"steps": steps, "tx": tx, "idle": idle, "hostb": hostb, "worker": worker}


def main() -> None:
    part, raw = sys.argv[1], sys.argv[2]
    figures = asyncio.run(PARTS[part](json.loads(raw)))
    print("FIGURES " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
