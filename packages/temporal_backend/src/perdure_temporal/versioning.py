"""perdure's code version as Temporal Worker Versioning.

A process with ``PERDURE_CODE_VERSION`` set is a version of a Worker Deployment: the
deployment is named after the task queue, the version's build id is the code version.
Its workers poll as that version, and a run it starts is pinned to it
(``PinnedVersioningOverride``): the run's workflow tasks and every drive go only to
workers of the code the run started on, so a deploy of new code lets old runs finish
on the old workers while new runs start on the new. A process without the variable is
unversioned, as before; a task queue's processes should all be versioned or none
(Temporal sends a versioned run's tasks to no unversioned worker).
"""

from __future__ import annotations

import os

from temporalio.common import PinnedVersioningOverride, VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

#: The variable naming this process's code version (also what core records on runs).
CODE_VERSION = "PERDURE_CODE_VERSION"


def deployment_version(task_queue: str) -> WorkerDeploymentVersion | None:
    """This process's version of the task queue's deployment, or None (unversioned)."""
    build_id = os.environ.get(CODE_VERSION)
    if not build_id:
        return None
    return WorkerDeploymentVersion(deployment_name=task_queue, build_id=build_id)


def deployment_config(version: WorkerDeploymentVersion | None) -> WorkerDeploymentConfig | None:
    """The workers' options: poll as ``version``, runs pinned to the version they start on."""
    if version is None:
        return None
    return WorkerDeploymentConfig(
        version=version,
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def pinned(version: WorkerDeploymentVersion | None) -> PinnedVersioningOverride | None:
    """A new run's pin to the starting process's version."""
    return None if version is None else PinnedVersioningOverride(version)


def version_not_polled_yet(exc: BaseException) -> bool:
    """The server refused a pin to a version whose workers it has not yet seen poll (it
    learns of a version a moment after its first poll): starting again soon succeeds."""
    return (
        isinstance(exc, RPCError)
        and exc.status in (RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.INVALID_ARGUMENT)
        and "is not present in task queue" in exc.message
    )
