"""Every private DBOS name perdure uses, in one place, pinned by ``tests/dbos/test_dbos_compat.py``.

DBOS offers no public way to (a) reach its system database's engine and table
definitions, (b) take over a PENDING workflow of a dead executor on another host, or
(c) stop its pickle decoder. Each use is a function here; an upgrade that moves a name
fails that test loudly instead of breaking a code path at run time.
"""

from __future__ import annotations

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


def take_over(run_id: str, dead: str, me: str, version: str) -> bool:
    """Move the PENDING workflow ``run_id`` from the dead executor ``dead`` to ``me``
    (compare-and-set on ``workflow_status``, with a new ``owner_xid`` that fences the
    loser's writes), then execute it here. False when another executor won.

    DBOS recovers only its own executor id's workflows at launch; one of a dead host
    has no public path to another executor without Conductor.
    """
    import time
    import uuid

    from dbos._core import execute_dequeued_workflow
    from dbos._dbos import _get_dbos_instance  # pyright: ignore[reportPrivateUsage]

    dbos = _get_dbos_instance()
    sys_db = dbos._sys_db  # pyright: ignore[reportPrivateUsage]
    ws = sys_db.tables.workflow_status
    owner_xid = str(uuid.uuid4())
    with sys_db.engine.begin() as conn:
        res = conn.execute(
            sa.update(ws)
            .where(ws.c.workflow_uuid == run_id)
            .where(ws.c.status == "PENDING")
            .where(ws.c.executor_id == dead)
            .values(
                executor_id=me,
                owner_xid=owner_xid,
                application_version=version,
                recovery_attempts=ws.c.recovery_attempts + 1,
                updated_at=int(time.time() * 1000),
            )
        )
    if res.rowcount != 1:
        return False
    status = sys_db.get_workflow_status(run_id)
    if status is None:
        return False
    execute_dequeued_workflow(dbos, status, owner_xid)
    return True


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
    "pickle_refused",
    "refuse_pickle",
    "skip_operations_to",
    "system_engine",
    "system_tables",
    "take_over",
    "use_dbos_thread_pool",
]
