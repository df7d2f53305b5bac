"""The private DBOS names ``perdure_dbos._compat`` uses still exist and mean the same.

An upgrade of DBOS that moves or changes one fails here, naming it, instead of silently
re-enabling pickle or breaking recovery at run time.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from packaging.version import Version

from perdure_dbos import _compat


def test_the_installed_dbos_is_in_the_range_compat_was_written_for() -> None:
    installed = Version(version("dbos"))
    assert Version("3.4") <= installed < Version("3.5"), installed


def test_dbos_pickle_serializer_is_the_one_class_compat_replaces() -> None:
    import dbos._serialization as ser

    assert _compat.pickle_refused(), "perdure_dbos did not replace DBOS's pickle decoder"
    assert isinstance(ser.DBOSDefaultSerializer, ser.DefaultSerializer)
    assert ser.DBOSDefaultSerializer.name() == _compat.PICKLE
    # Every decode DBOS does goes through these, and they call the instance's method.
    for fn in (
        ser.deserialize_value,
        ser.deserialize_args,
        ser.deserialize_exception,
        ser.serialize_value_as,
    ):
        assert "DBOSDefaultSerializer" in inspect.getsource(fn), fn.__name__
    # No other code of DBOS holds pickle itself.
    import dbos

    root = Path(inspect.getfile(dbos)).parent
    users = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "pickle.loads" in p.read_text(encoding="utf-8")
    )
    assert users == ["_serialization.py"], users


def test_private_names_for_the_system_database(perdure_backend: Any) -> None:
    from dbos import DBOS
    from dbos._context import get_local_dbos_context

    assert perdure_backend is not None
    tables = _compat.system_tables()
    for table, columns in {
        "workflow_status": {
            "workflow_uuid",
            "status",
            "name",
            "executor_id",
            "application_version",
            "owner_xid",
            "recovery_attempts",
            "serialization",
            "inputs",
            "output",
            "error",
            "created_at",
            "updated_at",
            # a suspended run is a delayed workflow on its queue (_compat.suspend_workflow)
            "queue_name",
            "delay_until_epoch_ms",
            "started_at_epoch_ms",
        },
        "workflow_input": {"workflow_uuid", "inputs"},
        "workflow_output": {"workflow_uuid", "output", "error"},
        "operation_outputs": {
            "workflow_uuid",
            "function_id",
            "function_name",
            "output",
            "error",
            "serialization",
        },
        "notifications": {"destination_uuid", "topic", "consumed"},
    }.items():
        have = set(getattr(tables, table).c.keys())
        assert columns <= have, (table, columns - have)
    assert isinstance(_compat.system_engine(), sa.Engine)
    # Recovery of a dead executor's workflows: DBOS's own re-enqueue, one at a time.
    import dbos._recovery as recovery
    from dbos._sys_db import SystemDatabase

    assert list(inspect.signature(SystemDatabase.reenqueue_for_recovery).parameters) == [
        "self",
        "workflow_id",
        "executor_ids",
        "recovery_queue_name",
    ]
    assert "reenqueue_for_recovery" in inspect.getsource(recovery)
    assert get_local_dbos_context() is None  # outside a workflow
    assert inspect.iscoroutinefunction(
        DBOS._configure_asyncio_thread_pool  # pyright: ignore[reportPrivateUsage]
    )
    from dbos._context import DBOSContext

    assert isinstance(DBOSContext().function_id, int)
    # Suspension fences on the execution's ownership token and moves the row through
    # DBOS's own statuses; a rename of either fails here, not at a run's first wait.
    assert hasattr(DBOSContext(), "owner_xid")
    from dbos._sys_db import WorkflowStatusString

    statuses = {s.value for s in WorkflowStatusString}
    assert {_compat.PENDING, _compat.DELAYED, _compat.ENQUEUED} <= statuses, statuses


def test_dbos_queue_thread_rereads_the_listened_queues_each_round(perdure_backend: Any) -> None:
    """``_compat.listen_also`` replaces ``DBOS._listening_queues`` after launch: DBOS's
    queue thread must read it inside its loop (not once at start) for that to take."""
    from dbos._dbos import _get_dbos_instance  # pyright: ignore[reportPrivateUsage]
    from dbos._queue import queue_thread

    assert perdure_backend is not None
    source = inspect.getsource(queue_thread)
    loop = source[source.index("while not stop_event.is_set()") :]
    assert "dbos._listening_queues" in loop, "DBOS reads its listened queues once: relaunch"
    dbos = _get_dbos_instance()
    before = dbos._listening_queues  # pyright: ignore[reportPrivateUsage]
    assert isinstance(before, list)
    try:
        _compat.listen_also(frozenset({"compat-pin"}))
        assert "compat-pin" in dbos._listening_queues  # pyright: ignore[reportPrivateUsage]
    finally:
        dbos._listening_queues = before  # pyright: ignore[reportPrivateUsage]
