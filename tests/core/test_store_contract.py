"""The storage contract, run against every ``Store``: every column ``PERDURE_TEST_STORES``
selects whose backend is the embedded engine on a store (SQLite, PostgreSQL; Temporal and
DBOS are Backends of their own), plus memory, the reference. Tests of SQL rows written behind a
store's back run on the SQL columns only.

Time is simulated with explicit ``now=`` values; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from perdure._engine.backend import EmbeddedBackend
from perdure._errors import (
    BackendUnavailableError,
    ConfigurationError,
    CorruptHistoryError,
    InvalidRunStateError,
    LeaseLostError,
    RunNotFoundError,
    SerializationError,
)
from perdure._records import EventKind, NewEvent, RunStatus
from perdure._registry import open_backend
from perdure._store import Lease, NewRun, RunUpdate, Store
from perdure._stores.memory import MemoryStore
from perdure._stores.postgres import PostgresStore, parse_postgres_url
from perdure._stores.sqlite import SqliteStore

LEASE = 30.0


def later(seconds: float = 3600.0) -> float:
    """A time at which every lease granted now has expired."""
    return time.time() + seconds


#: Every column is a Store under the embedded engine but DBOS's and Temporal's.
pytestmark = [
    pytest.mark.perdure_memory,
    pytest.mark.perdure_not_on(
        "dbos+sqlite", "dbos+postgresql", "temporal", reason="a Backend, not a Store"
    ),
]
#: For tests that write SQL rows behind the store's back.
sql_only = pytest.mark.perdure_only("sqlite", "postgresql", reason="SQL rows behind the store")


def store_on(url: str) -> Store:
    """The ``Store`` the backend for ``url`` runs the embedded engine on."""
    backend = open_backend(url)
    assert isinstance(backend, EmbeddedBackend), f"{url} is not a Store under the engine"
    return backend.store


async def raw(store: Store, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run SQL on the store's database behind its back; ``{s}`` prefixes table names."""
    if isinstance(store, SqliteStore):
        with closing(sqlite3.connect(store.path)) as db, db:
            return db.execute(sql.replace("{s}", "").replace("%s", "?"), params).fetchall()
    assert isinstance(store, PostgresStore)
    conninfo, schema, _ = parse_postgres_url(store.url)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(sql.replace("{s}", f'"{schema}".').encode(), params)
        return list(await cur.fetchall()) if cur.description else []


@pytest.fixture
async def store(perdure_url: str) -> AsyncIterator[Store]:
    s = store_on(perdure_url)
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def sql_store(store: Store) -> Store:
    assert isinstance(store, SqliteStore | PostgresStore), "mark the test sql_only"
    return store


@asynccontextmanager
async def same_database(store: Store) -> AsyncIterator[Store]:
    """A second store on the same database (memory has only the one)."""
    if isinstance(store, MemoryStore):
        yield store
        return
    other = store_on(store.url)
    await other.open()
    try:
        yield other
    finally:
        await other.close()


def ev(
    kind: EventKind = EventKind.STEP_COMPLETED,
    data: Any = None,
    key: str | None = None,
    name: str | None = None,
) -> NewEvent:
    return NewEvent(kind, step_key=key, name=name, data=data)


async def start(
    store: Store,
    workflow: str = "wf",
    owner: str = "w1",
    input: Any = None,
    run_id: str | None = None,
) -> Lease:
    _, lease = await store.create_run(
        NewRun(run_id or f"run-{uuid.uuid4().hex[:12]}", workflow, input), owner, LEASE
    )
    assert lease is not None
    return lease


async def suspend(
    store: Store, lease: Lease, waiting_for: str | None, wake_at: float | None = None
) -> None:
    await store.append(
        lease,
        [ev(EventKind.SUSPENDED, name=waiting_for)],
        lease_seconds=LEASE,
        update=RunUpdate(RunStatus.SUSPENDED, waiting_for=waiting_for, wake_at=wake_at),
    )


# ---------------------------------------------------------------- runs and histories


async def test_create_run_is_idempotent(store: Store) -> None:
    new = NewRun("r-1", "wf", {"order": 42}, code_version="v1", details={"k": "v"})
    info, lease = await store.create_run(new, "w1", LEASE)
    assert lease == Lease("r-1", "w1", 1, 1)
    assert (info.status, info.owner, info.fence, info.input) == (
        RunStatus.RUNNING,
        "w1",
        1,
        {"order": 42},
    )
    # A store may add an entry of its own (its substrate's ids); the caller's are kept.
    assert info.details["k"] == "v" and info.code_version == "v1"
    again, none = await store.create_run(NewRun("r-1", "other", {"x": 1}), "w2", LEASE)
    assert none is None
    assert again == info == await store.get_run("r-1")
    history = await store.load_history("r-1")
    assert [(e.seq, e.kind, e.data) for e in history] == [(0, EventKind.RUN_STARTED, {"order": 42})]


async def test_append_advances_seq_and_history_round_trips(store: Store) -> None:
    lease = await start(store, input=["in"])
    big = "é" + "x" * 5_000_000
    payloads: list[Any] = [
        {"a": [1, 2.5, None, True], "nested": {"u": "ünïcode ✓", "n": -(2**70)}},
        None,
        "plain",
        {"big": big},
    ]
    await store.append(
        lease,
        [ev(data=payloads[0], key="1:a", name="a"), ev(EventKind.MARKER, data=None, name="patch")],
        lease_seconds=LEASE,
    )
    assert lease.next_seq == 3
    await store.append(lease, [ev(data=payloads[2], key="3:b", name="b")], lease_seconds=LEASE)
    await store.append(lease, [ev(data=payloads[3], key="4:big", name="big")], lease_seconds=LEASE)
    await store.append(lease, [], lease_seconds=LEASE)
    assert lease.next_seq == 5
    history = await store.load_history(lease.run_id)
    assert [e.seq for e in history] == [0, 1, 2, 3, 4]
    assert [e.kind for e in history] == [
        EventKind.RUN_STARTED,
        EventKind.STEP_COMPLETED,
        EventKind.MARKER,
        EventKind.STEP_COMPLETED,
        EventKind.STEP_COMPLETED,
    ]
    assert [e.data for e in history] == [["in"], *payloads]
    assert [(e.step_key, e.name) for e in history[1:]] == [
        ("1:a", "a"),
        (None, "patch"),
        ("3:b", "b"),
        ("4:big", "big"),
    ]
    assert all(isinstance(e.at, float) for e in history)
    assert history[1].at == history[2].at  # one append, one time
    run = await store.get_run(lease.run_id)
    assert run.owner == "w1" and run.lease_until is not None and run.lease_until > time.time()


async def test_fenced_append_after_takeover_is_rejected_and_writes_nothing(store: Store) -> None:
    old = await start(store, owner="w1")
    await store.deliver_signal(old.run_id, "go", 1, None, now=time.time())
    sig = await store.next_signal(old.run_id, "go")
    assert sig is not None
    new = await store.acquire(old.run_id, "w2", LEASE, now=later())
    assert new is not None and new.fence == 2 and new.next_seq == 1
    with pytest.raises(LeaseLostError):
        await store.append(old, [ev(data="late")], lease_seconds=LEASE)
    with pytest.raises(LeaseLostError):
        await store.append(
            old,
            [ev(EventKind.RUN_SUCCEEDED)],
            lease_seconds=LEASE,
            update=RunUpdate(RunStatus.SUCCEEDED, result="late"),
            consume_signal=sig.signal_id,
        )
    assert old.next_seq == 1
    assert len(await store.load_history(old.run_id)) == 1
    assert await store.next_signal(old.run_id, "go") == sig  # not consumed
    run = await store.get_run(old.run_id)
    assert (run.status, run.owner, run.result) == (RunStatus.RUNNING, "w2", None)
    await store.release(old)  # a stale release changes nothing
    assert (await store.get_run(old.run_id)).owner == "w2"
    await store.append(new, [ev(data="mine")], lease_seconds=LEASE)
    assert [e.data for e in await store.load_history(old.run_id)] == [None, "mine"]


async def test_acquire_respects_the_lease_and_bumps_the_fence(store: Store) -> None:
    lease = await start(store, owner="w1")
    await store.append(lease, [ev()], lease_seconds=LEASE)
    assert await store.acquire(lease.run_id, "w2", LEASE, now=time.time()) is None
    assert (
        await store.acquire(lease.run_id, "w2", LEASE, now=time.time(), break_owner="someone-else")
        is None
    )
    taken = await store.acquire(lease.run_id, "w2", LEASE, now=time.time(), break_owner="w1")
    assert taken == Lease(lease.run_id, "w2", 2, 2)
    again = await store.acquire(lease.run_id, "w3", LEASE, now=later())
    assert again is not None and again.fence == 3 and again.next_seq == 2
    run = await store.get_run(lease.run_id)
    assert (run.owner, run.fence, run.status) == ("w3", 3, RunStatus.RUNNING)
    with pytest.raises(RunNotFoundError):
        await store.acquire("no-such-run", "w2", LEASE, now=later())


async def test_release_and_renew(store: Store) -> None:
    lease = await start(store, owner="w1")
    other = await start(store, owner="w1")
    t = time.time()
    await store.renew("w1", 100.0, now=t)
    assert (await store.get_run(other.run_id)).lease_until == t + 100.0
    await store.release(lease)
    run = await store.get_run(lease.run_id)
    assert (run.owner, run.lease_until, run.status) == (None, None, RunStatus.RUNNING)
    taken = await store.acquire(lease.run_id, "w2", LEASE, now=time.time())
    assert taken is not None and taken.fence == 2


# ---------------------------------------------------------------- claiming


async def test_claim_due_respects_workflows_limit_and_wake_time(store: Store) -> None:
    a = [await start(store, "wf-a") for _ in range(3)]
    b = await start(store, "wf-b")
    assert await store.claim_due("w2", LEASE, now=time.time(), workflows=["wf-a"], limit=10) == []
    t = later()
    first = await store.claim_due("w2", LEASE, now=t, workflows=["wf-a"], limit=2)
    second = await store.claim_due("w2", LEASE, now=t, workflows=["wf-a"], limit=2)
    assert len(first) == 2 and len(second) == 1
    assert {x.run_id for x in first + second} == {x.run_id for x in a}
    assert all(x.fence == 2 and x.owner == "w2" and x.next_seq == 1 for x in first + second)
    assert await store.claim_due("w2", LEASE, now=t, workflows=["wf-a"], limit=2) == []
    assert await store.claim_due("w2", LEASE, now=t, workflows=[], limit=2) == []
    assert [
        x.run_id
        for x in await store.claim_due("w2", LEASE, now=t, workflows=["wf-b", "wf-z"], limit=5)
    ] == [b.run_id]

    timer = await start(store, "wf-timer")
    wake = time.time() + 60.0
    await suspend(store, timer, None, wake_at=wake)
    assert await store.next_wake(["wf-timer", "wf-a"]) == wake
    assert await store.next_wake(["wf-a"]) is None
    assert await store.next_wake([]) is None
    assert await store.claim_due("w2", LEASE, now=wake - 1, workflows=["wf-timer"], limit=5) == []
    waiting = await start(store, "wf-timer")
    await suspend(store, waiting, "approval")  # no wake time: not due at any time
    due = await store.claim_due("w2", LEASE, now=wake + 1e6, workflows=["wf-timer"], limit=5)
    assert [(x.run_id, x.next_seq) for x in due] == [(timer.run_id, 2)]
    run = await store.get_run(timer.run_id)
    assert (run.status, run.wake_at, run.waiting_for) == (RunStatus.RUNNING, None, None)


async def test_claim_due_never_double_claims(store: Store) -> None:
    leases = [await start(store, "wf-race") for _ in range(24)]
    t = later()
    async with same_database(store) as other:
        results = await asyncio.gather(
            *(
                s.claim_due(f"w{i}", LEASE, now=t, workflows=["wf-race"], limit=4)
                for i, s in enumerate([store, other] * 6)
            )
        )
    claimed = [x.run_id for batch in results for x in batch]
    assert sorted(claimed) == sorted(x.run_id for x in leases)
    for lease in leases:
        assert (await store.get_run(lease.run_id)).fence == 2


# ---------------------------------------------------------------- signals


async def test_suspension_with_an_already_delivered_signal_is_due_at_once(store: Store) -> None:
    lease = await start(store, "wf-s")
    other = await start(store, "wf-s")
    await store.deliver_signal(lease.run_id, "approve", {"ok": True}, "alice", now=time.time())
    await store.deliver_signal(other.run_id, "approve", {"ok": True}, "alice", now=time.time())
    assert (await store.get_run(lease.run_id)).status is RunStatus.RUNNING
    await suspend(store, lease, "approve")
    await suspend(store, other, "something-else")
    run = await store.get_run(lease.run_id)
    assert run.status is RunStatus.SUSPENDED and run.wake_at is not None
    assert (await store.get_run(other.run_id)).wake_at is None
    due = await store.claim_due("w2", LEASE, now=time.time(), workflows=["wf-s"], limit=5)
    assert [x.run_id for x in due] == [lease.run_id]


async def test_a_signal_racing_a_suspension_is_never_missed(store: Store) -> None:
    async with same_database(store) as other:
        for i in range(40):
            lease = await start(store, "wf-race")

            async def suspend_it(lease: Lease = lease) -> None:
                await suspend(store, lease, "go")

            async def deliver_it(lease: Lease = lease) -> None:
                await other.deliver_signal(lease.run_id, "go", None, None, now=time.time())

            pair = (suspend_it(), deliver_it()) if i % 2 else (deliver_it(), suspend_it())
            await asyncio.gather(*pair)
            run = await store.get_run(lease.run_id)
            assert run.status is RunStatus.SUSPENDED and run.wake_at is not None, i


async def test_a_signal_consumed_in_the_suspending_append_does_not_wake(store: Store) -> None:
    lease = await start(store)
    sig = await store.deliver_signal(lease.run_id, "next", 1, None, now=time.time())
    await store.append(
        lease,
        [ev(EventKind.SIGNAL_RECEIVED, data=1), ev(EventKind.SUSPENDED)],
        lease_seconds=LEASE,
        consume_signal=sig.signal_id,
        update=RunUpdate(RunStatus.SUSPENDED, waiting_for="next"),
    )
    assert (await store.get_run(lease.run_id)).wake_at is None


async def test_deliver_signal_wakes_a_run_suspended_on_that_name(store: Store) -> None:
    lease = await start(store, "wf-s")
    await suspend(store, lease, "approve")
    assert await store.claim_due("w2", LEASE, now=later(), workflows=["wf-s"], limit=5) == []
    t = time.time()
    await store.deliver_signal(lease.run_id, "unrelated", None, None, now=t)
    assert (await store.get_run(lease.run_id)).wake_at is None
    rec = await store.deliver_signal(lease.run_id, "approve", {"by": "bob"}, "bob", now=t)
    assert (rec.run_id, rec.name, rec.payload, rec.sent_by, rec.sent_at) == (
        lease.run_id,
        "approve",
        {"by": "bob"},
        "bob",
        t,
    )
    run = await store.get_run(lease.run_id)
    assert (run.status, run.wake_at) == (RunStatus.SUSPENDED, t)
    due = await store.claim_due("w2", LEASE, now=t, workflows=["wf-s"], limit=5)
    assert [(x.run_id, x.next_seq) for x in due] == [(lease.run_id, 2)]


async def test_terminal_runs_take_no_signals_and_no_cancel(store: Store) -> None:
    lease = await start(store)
    await store.append(
        lease,
        [ev(EventKind.RUN_SUCCEEDED, data=7)],
        lease_seconds=LEASE,
        update=RunUpdate(RunStatus.SUCCEEDED, result={"r": 7}),
    )
    run = await store.get_run(lease.run_id)
    assert (run.status, run.result, run.owner, run.lease_until) == (
        RunStatus.SUCCEEDED,
        {"r": 7},
        None,
        None,
    )
    with pytest.raises(InvalidRunStateError):
        await store.deliver_signal(lease.run_id, "approve", None, None, now=time.time())
    with pytest.raises(InvalidRunStateError):
        await store.request_cancel(lease.run_id, now=time.time())
    assert await store.next_signal(lease.run_id, "approve") is None
    assert await store.claim_due("w2", LEASE, now=later(), workflows=["wf"], limit=5) == []


async def test_next_signal_returns_the_oldest_unconsumed(store: Store) -> None:
    lease = await start(store)
    t = time.time()
    s1 = await store.deliver_signal(lease.run_id, "msg", {"n": 1}, "alice", now=t)
    s2 = await store.deliver_signal(lease.run_id, "msg", [1, "two"], None, now=t + 1)
    s3 = await store.deliver_signal(lease.run_id, "other", "x", None, now=t + 2)
    assert s1.signal_id < s2.signal_id < s3.signal_id
    assert await store.next_signal(lease.run_id, "msg") == s1
    await store.append(
        lease,
        [ev(EventKind.SIGNAL_RECEIVED, data={"n": 1}, name="msg")],
        lease_seconds=LEASE,
        consume_signal=s1.signal_id,
    )
    assert await store.next_signal(lease.run_id, "msg") == s2
    assert await store.next_signal(lease.run_id, "other") == s3
    assert await store.next_signal(lease.run_id, "nothing") is None
    assert await store.next_signal("no-such-run", "msg") is None


async def test_request_cancel_is_seen_by_the_next_append(store: Store) -> None:
    lease = await start(store)
    await store.append(lease, [ev()], lease_seconds=LEASE)
    assert lease.cancel_requested is False
    info = await store.request_cancel(lease.run_id, now=time.time())
    assert info.cancel_requested and info.status is RunStatus.RUNNING
    await store.append(lease, [ev()], lease_seconds=LEASE)
    assert lease.cancel_requested is True

    parked = await start(store, "wf-c")
    await store.append(
        parked,
        [ev(EventKind.NEEDS_ATTENTION)],
        lease_seconds=LEASE,
        update=RunUpdate(RunStatus.NEEDS_ATTENTION, attention={"step": "1:x"}),
    )
    t = time.time()
    info = await store.request_cancel(parked.run_id, now=t)
    assert (info.status, info.wake_at, info.cancel_requested) == (RunStatus.SUSPENDED, t, True)
    due = await store.claim_due("w2", LEASE, now=t, workflows=["wf-c"], limit=5)
    assert len(due) == 1 and due[0].cancel_requested is True
    with pytest.raises(RunNotFoundError):
        await store.request_cancel("no-such-run", now=t)


async def test_admin_append_respects_expect(store: Store) -> None:
    lease = await start(store, "wf-adm")
    await store.append(lease, [ev(EventKind.INTENT, key="1:pay")], lease_seconds=LEASE)
    await store.append(
        lease,
        [ev(EventKind.NEEDS_ATTENTION)],
        lease_seconds=LEASE,
        update=RunUpdate(RunStatus.NEEDS_ATTENTION, attention={"step": "1:pay"}),
    )
    parked = await store.get_run(lease.run_id)
    assert parked.attention == {"step": "1:pay"}
    with pytest.raises(InvalidRunStateError):
        await store.admin_append(
            lease.run_id,
            [ev(EventKind.RECONCILED)],
            expect=[RunStatus.SUSPENDED],
            status=RunStatus.PENDING,
            now=time.time(),
        )
    assert len(await store.load_history(lease.run_id)) == 3
    t = time.time()
    info = await store.admin_append(
        lease.run_id,
        [ev(EventKind.RECONCILED, data={"outcome": "paid"}, key="1:pay")],
        expect=[RunStatus.NEEDS_ATTENTION],
        status=RunStatus.PENDING,
        now=t,
    )
    assert (info.status, info.attention, info.wake_at, info.updated_at) == (
        RunStatus.PENDING,
        None,
        t,
        t,
    )
    last = (await store.load_history(lease.run_id))[-1]
    assert (last.seq, last.kind, last.data, last.at) == (
        3,
        EventKind.RECONCILED,
        {"outcome": "paid"},
        t,
    )
    due = await store.claim_due("w2", LEASE, now=t, workflows=["wf-adm"], limit=5)
    assert [(x.run_id, x.next_seq) for x in due] == [(lease.run_id, 4)]
    with pytest.raises(RunNotFoundError):
        await store.admin_append(
            "no-such-run", [], expect=[RunStatus.PENDING], status=RunStatus.PENDING, now=t
        )


async def test_list_runs_filters_and_orders_newest_first(store: Store) -> None:
    r1 = await start(store, "wf-a", run_id="r1")
    r2 = await start(store, "wf-b", run_id="r2")
    await start(store, "wf-a", run_id="r3")
    await store.append(
        r2,
        [ev(EventKind.RUN_SUCCEEDED)],
        lease_seconds=LEASE,
        update=RunUpdate(RunStatus.SUCCEEDED, result=1),
    )
    await store.append(r1, [ev()], lease_seconds=LEASE)
    info = {r.run_id: r for r in await store.list_runs()}

    async def ids(**kw: Any) -> list[str]:
        return [r.run_id for r in await store.list_runs(**kw)]

    assert await ids() == ["r3", "r2", "r1"]
    assert await ids(statuses=[RunStatus.SUCCEEDED]) == ["r2"]
    assert await ids(statuses=[RunStatus.RUNNING, RunStatus.SUCCEEDED]) == ["r3", "r2", "r1"]
    assert await ids(statuses=[]) == []
    assert await ids(workflow="wf-a") == ["r3", "r1"]
    assert await ids(limit=1) == ["r3"]
    assert await ids(updated_before=info["r2"].updated_at) == ["r3"]
    assert await ids(updated_before=info["r1"].updated_at + 1, workflow="wf-b") == ["r2"]
    assert await ids(statuses=[RunStatus.RUNNING], workflow="wf-a", limit=1) == ["r3"]


async def test_unknown_runs_raise_run_not_found(store: Store) -> None:
    with pytest.raises(RunNotFoundError, match="no-such-run"):
        await store.get_run("no-such-run")
    with pytest.raises(RunNotFoundError):
        await store.load_history("no-such-run")
    with pytest.raises(RunNotFoundError):
        await store.deliver_signal("no-such-run", "x", None, None, now=time.time())
    with pytest.raises(RunNotFoundError):
        await store.release(Lease("no-such-run", "w1", 1, 1))


# ---------------------------------------------------------------- SQL stores only


@sql_only
async def test_a_corrupt_event_row_is_reported_and_left_alone(sql_store: Store) -> None:
    lease = await start(sql_store)
    await sql_store.append(lease, [ev(data={"ok": 1}), ev(data=2)], lease_seconds=LEASE)
    await raw(
        sql_store,
        "UPDATE {s}events SET data = %s WHERE run_id = %s AND seq = 1",
        "{not json",
        lease.run_id,
    )
    with pytest.raises(CorruptHistoryError) as caught:
        await sql_store.load_history(lease.run_id)
    assert (caught.value.run_id, caught.value.seq) == (lease.run_id, 1)
    assert lease.run_id in str(caught.value) and "#1" in str(caught.value)
    rows = await raw(
        sql_store, "SELECT data FROM {s}events WHERE run_id = %s ORDER BY seq", lease.run_id
    )
    assert [r[0] for r in rows] == [None, "{not json", "2"]

    await raw(
        sql_store,
        "UPDATE {s}events SET data = '1', kind = 'bogus' WHERE run_id = %s AND seq = 1",
        lease.run_id,
    )
    with pytest.raises(CorruptHistoryError, match="bogus"):
        await sql_store.load_history(lease.run_id)


@sql_only
async def test_a_corrupt_run_row_is_reported_with_no_seq(sql_store: Store) -> None:
    lease = await start(sql_store, input={"a": 1})
    await raw(sql_store, "UPDATE {s}runs SET details = %s WHERE run_id = %s", "[1,", lease.run_id)
    with pytest.raises(CorruptHistoryError) as caught:
        await sql_store.get_run(lease.run_id)
    assert (caught.value.run_id, caught.value.seq) == (lease.run_id, None)
    await raw(
        sql_store,
        "UPDATE {s}runs SET details = '{}', status = 'weird' WHERE run_id = %s",
        lease.run_id,
    )
    # A listing shows the corrupt row (the others stay listed: tests/core/test_corrupt_rows.py).
    (listed,) = [r for r in await sql_store.list_runs() if r.run_id == lease.run_id]
    assert listed.status is RunStatus.NEEDS_ATTENTION and listed.attention is not None
    assert listed.attention["reason"] == "corrupt" and "weird" in listed.attention["message"]
    rows = await raw(sql_store, "SELECT status FROM {s}runs WHERE run_id = %s", lease.run_id)
    assert rows == [("weird",)]


@sql_only
async def test_a_corrupt_input_names_the_run_started_event(sql_store: Store) -> None:
    lease = await start(sql_store, input={"a": 1})
    await raw(sql_store, "UPDATE {s}events SET data = 'nope' WHERE run_id = %s", lease.run_id)
    with pytest.raises(CorruptHistoryError) as caught:
        await sql_store.get_run(lease.run_id)
    assert (caught.value.run_id, caught.value.seq) == (lease.run_id, 0)


@sql_only
async def test_values_that_are_not_json_are_refused_and_nothing_is_written(
    sql_store: Store,
) -> None:
    lease = await start(sql_store)
    with pytest.raises(SerializationError):
        await sql_store.append(lease, [ev(data=ev())], lease_seconds=LEASE)
    with pytest.raises(SerializationError):
        await sql_store.append(lease, [ev(data=float("nan"))], lease_seconds=LEASE)
    assert lease.next_seq == 1 and len(await sql_store.load_history(lease.run_id)) == 1


@sql_only
async def test_migrations_are_idempotent(sql_store: Store) -> None:
    await sql_store.open()
    await sql_store.close()
    await sql_store.open()
    async with same_database(sql_store):
        pass
    versions = await raw(sql_store, "SELECT version FROM {s}perdure_migrations ORDER BY version")
    assert versions == [(1,), (2,)]


async def test_an_unreachable_postgresql_fails_fast() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/test")
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=re.escape("127.0.0.1:1")):
        await store.open()
    assert time.monotonic() - t0 < 6.0


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///:memory:",
        "sqlite://",
        "sqlite:///",
        "sqlite://host/db.sqlite",
        "sqlite:///db.sqlite?synchronous=sometimes",
        "sqlite:///db.sqlite?journal=wal",
        "postgresql:///db.sqlite",
    ],
)
def test_bad_sqlite_urls_raise_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SqliteStore(url)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x.db",
        "postgresql://u@h/db?schema=no-dashes",
        "postgresql://u@h/db?pool_size=0",
        "postgresql://u@h/db?pool_size=many",
    ],
)
def test_bad_postgres_urls_raise_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError):
        PostgresStore(url)


def test_postgres_url_options_are_perdures_or_libpqs() -> None:
    conninfo, schema, pool = parse_postgres_url(
        "postgres://u:pw@db.example:6543/app?schema=jobs&pool_size=3&sslmode=disable"
    )
    assert (conninfo, schema, pool) == (
        "postgres://u:pw@db.example:6543/app?sslmode=disable",
        "jobs",
        3,
    )
    conninfo, _, _ = parse_postgres_url(
        "postgresql://u@h/db?options=-c%20statement_timeout%3D5s&schema=x"
    )
    assert conninfo == "postgresql://u@h/db?options=-c%20statement_timeout%3D5s"
    store = PostgresStore("postgresql://u:secret@db.example:6543/app")
    assert store.where == "db.example:6543/app" and store.schema == "perdure"


async def test_sqlite_paths_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = SqliteStore("sqlite:///sub/rel.db?synchronous=FULL")
    assert (rel.path, rel.synchronous) == ("sub/rel.db", "full")
    with pytest.raises(BackendUnavailableError, match=re.escape("sub/rel.db")):
        await rel.open()  # the directory does not exist
    (tmp_path / "sub").mkdir()
    await rel.open()
    await start(rel)
    await rel.close()
    assert (tmp_path / "sub" / "rel.db").is_file()
    absolute = SqliteStore(f"sqlite:///{tmp_path}/sub/rel.db")
    assert absolute.path == f"{tmp_path}/sub/rel.db" and absolute.synchronous == "normal"
    await absolute.open()
    assert len(await absolute.list_runs()) == 1
    await absolute.close()
