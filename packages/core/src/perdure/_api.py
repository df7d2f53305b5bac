"""Module-level API: start and run workflows, signal, cancel, inspect, on the default
backend of this process (or the one a ``url=`` names)."""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Sequence
from typing import Any, ParamSpec, TypeVar

from perdure._authorization import Authorizer
from perdure._backend import Backend, ReconcileOutcome, RunHandle
from perdure._config import resolve_url
from perdure._records import Event, RunInfo, RunStatus
from perdure._registry import open_backend
from perdure._semantics.approvals import APPROVAL
from perdure._workflow import Workflow

__all__ = [
    "APPROVAL",
    "approve",
    "cancel",
    "configure",
    "connect",
    "get_handle",
    "get_run",
    "history",
    "list_runs",
    "reconcile",
    "reject",
    "resume",
    "run",
    "shutdown",
    "signal",
    "start",
]

P = ParamSpec("P")
R = TypeVar("R")

#: The backends ``connect`` opened, per event loop (held weakly: never ``id(loop)``, which
#: a later loop may reuse and so get a backend bound to a dead loop) and URL.
_backends: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Backend]] = (
    weakref.WeakKeyDictionary()
)
_default_url: str | None = None
#: One lock per event loop: the first callers of ``connect`` on a URL open one backend.
_opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def configure(url: str | None) -> None:
    """Set this process's default backend URL (``None``: back to the environment)."""
    global _default_url
    _default_url = url


def _opened_on(loop: asyncio.AbstractEventLoop) -> dict[str, Backend]:
    """The backends of ``loop``. Those of closed loops are dropped here: they cannot run
    again, and a backend may hold its loop alive, so weak keys alone would not free them."""
    for closed in [other for other in _backends if other.is_closed()]:
        del _backends[closed]
    return _backends.setdefault(loop, {})


async def connect(url: str | None = None) -> Backend:
    """The opened backend for ``url`` (resolved as in DESIGN: argument, env, pyproject,
    default), shared within this process and event loop."""
    resolved = resolve_url(url or _default_url)
    loop = asyncio.get_running_loop()
    opened = _opened_on(loop)
    backend = opened.get(resolved)
    if backend is not None:
        return backend
    async with _opening.setdefault(loop, asyncio.Lock()):
        backend = opened.get(resolved)  # again: the caller before us may have opened it
        if backend is None:
            backend = open_backend(resolved)
            await backend.open()
            opened[resolved] = backend
    return backend


async def shutdown(*, grace: float | None = None) -> None:
    """Drain and close every backend ``connect`` opened on this event loop: no new work
    is taken, in-flight steps finish and record (for up to ``grace`` seconds, default
    30), then their runs are released so another worker takes them over at once."""
    backends = list(_backends.pop(asyncio.get_running_loop(), {}).values())
    for backend in backends:
        await backend.shutdown(grace=grace)


async def start(
    workflow: Workflow[P, R],
    /,
    *args: Any,
    run_id: str | None = None,
    url: str | None = None,
    **kwargs: Any,
) -> RunHandle:
    """Start a durable run and return its handle at once; this process drives it.

    Starting is idempotent: an existing ``run_id`` returns the existing run.
    """
    backend = await connect(url)
    rid = uuid.uuid4().hex if run_id is None else run_id  # "" is refused, not replaced
    return await backend.start(workflow, args, kwargs, run_id=rid)


async def run(
    workflow: Workflow[P, R],
    /,
    *args: Any,
    run_id: str | None = None,
    url: str | None = None,
    **kwargs: Any,
) -> R:
    """Start a durable run, wait for it and return its result."""
    handle = await start(workflow, *args, run_id=run_id, url=url, **kwargs)
    result: R = await handle.result()
    return result


async def get_handle(run_id: str, *, url: str | None = None) -> RunHandle:
    backend = await connect(url)
    await backend.get_run(run_id)
    return RunHandle(backend, run_id)


async def get_run(run_id: str, *, url: str | None = None) -> RunInfo:
    return await (await connect(url)).get_run(run_id)


async def list_runs(
    *,
    statuses: Sequence[RunStatus] | None = None,
    older_than: float | None = None,
    workflow: str | None = None,
    limit: int = 100,
    url: str | None = None,
) -> list[RunInfo]:
    backend = await connect(url)
    return await backend.list_runs(
        statuses=statuses, older_than=older_than, workflow=workflow, limit=limit
    )


async def history(run_id: str, *, url: str | None = None) -> list[Event]:
    return await (await connect(url)).history(run_id)


async def signal(
    run_id: str,
    name: str,
    payload: Any = None,
    *,
    by: str | None = None,
    token: str | None = None,
    authorizer: Authorizer | str | None = None,
    url: str | None = None,
) -> None:
    """Deliver the signal ``name`` to a run, from any process, as ``by`` (or the
    ``token``'s subject) once the authorizer allows it (``perdure._authorization``)."""
    backend = await connect(url)
    await backend.signal(run_id, name, payload, by=by, token=token, authorizer=authorizer)


async def approve(
    run_id: str,
    request: str | None = None,
    *,
    by: str | None = None,
    token: str | None = None,
    message: str | None = None,
    authorizer: Authorizer | str | None = None,
    url: str | None = None,
) -> str:
    """Approve approval request ``request`` of the run (a ``wait_for_signal("approval")``;
    ``RunInfo.request_id`` names the pending one); returns the request answered.
    ``ApprovalNotPendingError`` when it is not pending: answered already, timed out, or
    the run moved on. Without ``request``, the request pending now is approved; name it
    to approve what you saw. The caller is ``by`` (or ``PERDURE_ACTOR``), or the subject
    of a signed ``token``, as the authorizer in force decides."""
    backend = await connect(url)
    answer = await backend.approve(
        run_id, request, message=message, by=by, token=token, authorizer=authorizer
    )
    return answer.request


async def reject(
    run_id: str,
    request: str | None = None,
    *,
    by: str | None = None,
    token: str | None = None,
    message: str | None = None,
    authorizer: Authorizer | str | None = None,
    url: str | None = None,
) -> str:
    """Reject approval request ``request`` of the run (as ``approve``)."""
    backend = await connect(url)
    answer = await backend.reject(
        run_id, request, message=message, by=by, token=token, authorizer=authorizer
    )
    return answer.request


async def cancel(
    run_id: str,
    *,
    by: str | None = None,
    token: str | None = None,
    authorizer: Authorizer | str | None = None,
    url: str | None = None,
) -> RunInfo:
    backend = await connect(url)
    return await backend.cancel(run_id, by=by, token=token, authorizer=authorizer)


async def resume(
    run_id: str,
    *,
    by: str | None = None,
    token: str | None = None,
    authorizer: Authorizer | str | None = None,
    url: str | None = None,
) -> RunInfo:
    backend = await connect(url)
    return await backend.resume(run_id, by=by, token=token, authorizer=authorizer)


async def reconcile(
    run_id: str,
    step_key: str,
    outcome: ReconcileOutcome,
    *,
    result: Any = None,
    message: str | None = None,
    by: str | None = None,
    token: str | None = None,
    authorizer: Authorizer | str | None = None,
    url: str | None = None,
) -> RunInfo:
    backend = await connect(url)
    return await backend.reconcile(
        run_id,
        step_key,
        outcome,
        result=result,
        message=message,
        by=by,
        token=token,
        authorizer=authorizer,
    )
