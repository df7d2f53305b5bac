"""Every private DBOS name perdure uses, in one place, pinned by ``tests/dbos/test_dbos_compat.py``.

DBOS offers no public way to (a) reach its system database's engine and table
definitions, (b) recover the PENDING workflows of a dead executor on another host
without Conductor (its documented admin endpoint is not in this release), (c) stop
its pickle decoder, or (d) end a workflow's execution as a delayed workflow (a
suspended run) and wake it, fenced, in the transaction of perdure's own write. Each
use is a function here; an upgrade that moves a name fails that test loudly instead
of breaking a code path at run time.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn, cast

import sqlalchemy as sa

from perdure_dbos._serializer import PickleRefusedError

#: The ``serialization`` DBOS writes for its pickle format (``py_pickle``).
PICKLE = "py_pickle"


def _refuse_loads(self: Any, serialized_data: str) -> NoReturn:
    raise PickleRefusedError(
        f"a DBOS row serialized as {PICKLE!r} was refused unread: perdure never decodes pickle"
    )


def _refuse_dumps(self: Any, data: Any) -> NoReturn:
    raise PickleRefusedError(
        f"DBOS was asked to write a value as {PICKLE!r}; perdure never writes pickle"
    )


def refuse_pickle() -> None:
    """Replace DBOS's pickle serializer in this process: every DBOS code path that would
    ``pickle.loads`` a row marked ``py_pickle`` (its replay of a step, ``recv``, its
    introspection API, recovery at launch, ``DBOSClient``) raises ``PickleRefusedError``.

    DBOS keeps one module-level instance and builds others (``DBOSClient``), all of the
    one class: patching the class's methods covers every one of them.
    """
    from dbos._serialization import DefaultSerializer

    DefaultSerializer.deserialize = _refuse_loads  # type: ignore[method-assign]
    DefaultSerializer.serialize = _refuse_dumps  # type: ignore[method-assign]


def pickle_refused() -> bool:
    """Whether ``refuse_pickle`` is in force (for the compat test and a sanity check)."""
    from dbos._serialization import DBOSDefaultSerializer, DefaultSerializer

    return (
        DefaultSerializer.deserialize is _refuse_loads  # pyright: ignore[reportUnknownMemberType]
        and isinstance(DBOSDefaultSerializer, DefaultSerializer)
        and DBOSDefaultSerializer.name() == PICKLE
    )


def _sys_db() -> Any:
    from dbos._dbos import _get_dbos_instance  # pyright: ignore[reportPrivateUsage]

    return _get_dbos_instance()._sys_db  # pyright: ignore[reportPrivateUsage]


def system_engine() -> sa.Engine:
    """The SQLAlchemy engine of the launched DBOS's system database."""
    return cast(sa.Engine, _sys_db().engine)


def system_tables() -> Any:
    """DBOS's table definitions (``workflow_status``, ``workflow_input``,
    ``workflow_output``, ``operation_outputs``, ``notifications``), bound to the schema
    the launched DBOS uses."""
    return _sys_db().tables


def recover(run_ids: list[str], dead: list[str], queue: str) -> list[str]:
    """Hand the PENDING workflows ``run_ids`` of the dead executors ``dead`` to DBOS's
    recovery, onto ``queue``; the ids DBOS re-enqueued.

    This is DBOS's own recovery of a dead executor's workflows, what its admin endpoint
    ``/dbos-workflow-recovery`` and Conductor trigger (``DBOS._recover_pending_workflows``
    → ``_recover_workflow`` → ``reenqueue_for_recovery``), taken one workflow at a time so
    perdure can leave out a row it refuses to let DBOS decode (``py_pickle``), and onto
    perdure's queue rather than DBOS's internal one (which every launched process
    dequeues, clients included). DBOS re-enqueues each with a compare-and-set on its
    status and executor id, and exactly one live executor of its application version
    dequeues it, with a new ``owner_xid`` that fences the dead one's writes.
    """
    from dbos._dbos import _get_dbos_instance  # pyright: ignore[reportPrivateUsage]

    sys_db = _get_dbos_instance()._sys_db  # pyright: ignore[reportPrivateUsage]
    return [run_id for run_id in run_ids if sys_db.reenqueue_for_recovery(run_id, dead, queue)]


#: DBOS's statuses a suspended run moves through (``_sys_db.WorkflowStatusString``).
PENDING, DELAYED, ENQUEUED = "PENDING", "DELAYED", "ENQUEUED"


def suspend_workflow(
    c: sa.Connection, run_id: str, owner_xid: str, wake_ms: int | None, queue: str
) -> bool:
    """End the current execution of the PENDING workflow ``run_id`` as a DBOS *delayed*
    workflow, on ``c`` (the caller's transaction); whether it did.

    The row becomes what DBOS writes for a workflow enqueued with a delay (``DELAYED``,
    ``delay_until_epoch_ms``, on its queue, no owner): DBOS's background job enqueues it
    when the delay passes (one indexed statement per second for all such workflows, in
    one process of the application) and a worker of its queue and version dequeues it,
    with a new ``owner_xid``. ``wake_ms`` None: no delay, only ``wake_workflow`` (a
    signal) enqueues it. It is no longer PENDING, so neither DBOS's recovery at launch
    nor perdure's of dead executors drives it meanwhile. Fenced: only while the row is
    PENDING and owned by ``owner_xid`` (this execution), so an execution that lost the
    workflow cannot suspend it. The dispatch count DBOS dead-letters by restarts from
    zero: a run that suspended cleanly has not failed a dispatch.

    DBOS's public ``resume_workflow`` is not used to wake it: it re-enqueues a workflow
    in any state but ended (a PENDING one another executor drives included) and outside
    perdure's transaction, so two workers could drive one run.
    """
    ws = system_tables().workflow_status
    done = c.execute(
        sa.update(ws)
        .where(ws.c.workflow_uuid == run_id, ws.c.status == PENDING, ws.c.owner_xid == owner_xid)
        .values(
            status=DELAYED,
            delay_until_epoch_ms=wake_ms,
            queue_name=sa.func.coalesce(ws.c.queue_name, queue),
            owner_xid=None,
            started_at_epoch_ms=None,
            recovery_attempts=0,
            updated_at=int(time.time() * 1000),
        )
    )
    return done.rowcount == 1


def wake_workflow(c: sa.Connection, run_id: str) -> bool:
    """Enqueue the suspended (``DELAYED``) workflow ``run_id`` now, on ``c``; whether it
    was suspended. What DBOS's background job does when a delay passes, at once."""
    ws = system_tables().workflow_status
    done = c.execute(
        sa.update(ws)
        .where(ws.c.workflow_uuid == run_id, ws.c.status == DELAYED)
        .values(status=ENQUEUED, delay_until_epoch_ms=None, updated_at=int(time.time() * 1000))
    )
    return done.rowcount == 1


def current_owner_xid() -> str:
    """The ownership token of the current workflow execution (DBOS fences its writes
    by it)."""
    from dbos._context import get_local_dbos_context

    ctx = get_local_dbos_context()
    if ctx is None or ctx.owner_xid is None:
        raise RuntimeError("not inside a DBOS workflow execution")
    return str(ctx.owner_xid)


async def use_dbos_thread_pool() -> None:
    """Point this loop's ``asyncio.to_thread`` at the launched DBOS's executor.

    DBOS's async API does this before its first ``to_thread``; a loop that saw an earlier
    DBOS destroyed still points at that one's shut-down pool, and perdure's own reads
    run in threads before any DBOS async call.
    """
    from dbos import DBOS

    await DBOS._configure_asyncio_thread_pool()  # pyright: ignore[reportPrivateUsage]


def skip_operations_to(function_id: int) -> None:
    """Let the current workflow execution's next DBOS operation take the id after
    ``function_id``: the operations up to it are recorded, and perdure replays them from
    its own reading of the rows, not through DBOS (never backwards)."""
    from dbos._context import get_local_dbos_context

    ctx = get_local_dbos_context()
    if ctx is None:
        raise RuntimeError("not inside a DBOS workflow execution")
    ctx.function_id = max(int(ctx.function_id), function_id)


def current_function_id() -> int | None:
    """The id of the DBOS operation the current workflow execution last reached."""
    from dbos._context import get_local_dbos_context

    ctx = get_local_dbos_context()
    return None if ctx is None else int(ctx.function_id)


__all__ = [
    "PICKLE",
    "current_function_id",
    "current_owner_xid",
    "pickle_refused",
    "recover",
    "refuse_pickle",
    "skip_operations_to",
    "suspend_workflow",
    "system_engine",
    "system_tables",
    "use_dbos_thread_pool",
    "wake_workflow",
]


def listen_also(queues: frozenset[str]) -> None:
    """Make the launched DBOS dequeue ``queues`` too, without a relaunch.

    DBOS's public ``listen_queues`` is fixed before launch, but its queue thread re-reads
    the list (``DBOS._listening_queues``) every second and starts a worker thread for a
    queue it names, so a process that opened as a client becomes an executor of a queue
    within a second of being told. The list is replaced, not mutated: the thread reads
    it whole. ``None`` (DBOS listening to every queue) is left as is.
    """
    from dbos._dbos import _get_dbos_instance  # pyright: ignore[reportPrivateUsage]

    dbos = _get_dbos_instance()
    current = dbos._listening_queues  # pyright: ignore[reportPrivateUsage]
    if current is not None:
        dbos._listening_queues = sorted(set(current) | queues)  # pyright: ignore[reportPrivateUsage]
