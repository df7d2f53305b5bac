"""``@perdure.workflow``: a module-level async function that can run durably."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from perdure._errors import ConfigurationError, WorkflowNotFoundError
from perdure._locate import importable_name
from perdure._type_registry import register_annotations

P = ParamSpec("P")
R = TypeVar("R")

_REGISTRY: dict[str, Workflow[..., Any]] = {}


class Workflow(Generic[P, R]):
    """A registered workflow. Calling it directly runs the function plainly."""

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]],
        name: str,
        version: str | None,
        queue: str | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.version = version
        #: The substrate queue its runs wait on for a worker (``perdure worker --queue``).
        self.queue = queue
        functools.update_wrapper(self, fn)

    @property
    def code_version(self) -> str | None:
        """The version recorded on new runs: the declared one, else ``PERDURE_CODE_VERSION``."""
        return self.version or os.environ.get("PERDURE_CODE_VERSION")

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<perdure.workflow {self.name}>"


@overload
def workflow(fn: Callable[P, Awaitable[R]], /) -> Workflow[P, R]: ...
@overload
def workflow(
    *, name: str | None = None, version: str | None = None, queue: str | None = None
) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]: ...


def workflow(
    fn: Callable[P, Awaitable[R]] | None = None,
    /,
    *,
    name: str | None = None,
    version: str | None = None,
    queue: str | None = None,
) -> Workflow[P, R] | Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
    """Register a module-level async function as a workflow.

    Its name defaults to ``module:qualname`` (for a script run as ``__main__``, the
    module name a worker imports it by); a worker that imports the module can resume
    its runs. ``version`` is recorded on every run it starts. ``queue``: on a backend
    whose substrate has queues (DBOS), a run waits on that queue for a ``perdure worker
    --queue NAME`` (its concurrency and rate limits) instead of being driven by the
    process that starts it; the embedded engine drives it as any other run.
    """

    def register(f: Callable[P, Awaitable[R]]) -> Workflow[P, R]:
        if not inspect.iscoroutinefunction(f):
            raise ConfigurationError(
                f"@perdure.workflow needs an async function; {f.__qualname__} is not"
            )
        if "<locals>" in f.__qualname__ and name is None:
            raise ConfigurationError(
                f"@perdure.workflow on {f.__qualname__}: define it at module level "
                "(or give it a name=) so a worker can import and resume it"
            )
        # A script's workflows are named by the module a worker imports, not __main__.
        module = importable_name(f.__module__)
        wf = Workflow(f, name or f"{module}:{f.__qualname__}", version, queue)
        register_workflow(wf)
        register_annotations(f)  # its inputs and result are rebuilt from history
        return wf

    return register(fn) if fn is not None else register


def register_workflow(wf: Workflow[..., Any]) -> None:
    """Make ``wf`` resumable by name in this process (adapters register theirs here)."""
    _REGISTRY[wf.name] = wf


def get_workflow(name: str) -> Workflow[..., Any]:
    """The registered workflow called ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise WorkflowNotFoundError(
            f"workflow {name!r} is not registered in this process; "
            f"import the module that defines it (perdure worker MODULE)"
        ) from None


def registered_workflows() -> list[str]:
    """Names of every workflow registered in this process."""
    return list(_REGISTRY)
