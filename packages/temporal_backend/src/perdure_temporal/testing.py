"""The Temporal column of perdure's test matrix (entry-point groups ``perdure.test_stores``
and ``perdure.test_corrupters``).

One dev server serves a whole test session: the one ``PERDURE_TEST_TEMPORAL`` names
(``host:port``, started by ``nox``), else one this process starts on first use and
stops at exit. Every test gets its own task queue and workflow-id prefix, so tests
never see each other's runs, and its own payload directory.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import uuid
from collections.abc import Generator
from pathlib import Path

from perdure_temporal.devserver import DevServer

NOT_JSON = b"{not json"
#: History events per workflow execution in the test matrix (the default is 8,000).
HISTORY_LIMIT = 200
#: Seconds without a heartbeat before a drive moves to another worker (crash tests).
HEARTBEAT = 5

_server: DevServer | None = None


def session_target() -> str:
    """``host:port`` of this test session's dev server, starting it if needed."""
    global _server
    shared = os.environ.get("PERDURE_TEST_TEMPORAL")
    if shared:
        return shared
    if _server is None:
        _server = DevServer().start()
        atexit.register(_server.stop)
    return _server.target


def session_metrics() -> str:
    """``host:port`` where this test session's dev server serves its Prometheus metrics
    (``PERDURE_TEST_TEMPORAL_METRICS`` beside ``PERDURE_TEST_TEMPORAL``; ``nox`` sets
    both)."""
    target = session_target()
    if _server is not None and _server.target == target:
        return f"127.0.0.1:{_server.metrics_port}"
    metrics = os.environ.get("PERDURE_TEST_TEMPORAL_METRICS")
    if not metrics:
        raise RuntimeError(
            f"PERDURE_TEST_TEMPORAL={target} names a server whose metrics this session "
            "cannot read: set PERDURE_TEST_TEMPORAL_METRICS to its --metrics-port host:port"
        )
    return metrics


def fresh_url(tmp_path: Path, **params: str | int) -> str:
    """A URL on the session's dev server with its own task queue, id prefix and payload
    directory (under ``tmp_path``); ``params`` add to or override its query."""
    tag = uuid.uuid4().hex[:12]
    query: dict[str, str | int] = {
        "task_queue": f"t-{tag}",
        "id_prefix": f"{tag}-",
        "payloads": str(tmp_path / "payloads"),
        **params,
    }
    return f"temporal://{session_target()}/default?" + "&".join(
        f"{k}={v}" for k, v in query.items()
    )


@contextlib.contextmanager
def temporal_url(tmp_path: Path) -> Generator[str]:
    """The matrix's Temporal store. Payloads above 0 bytes go aside, so the corrupter
    reaches every stored value; a short history limit makes every longer scenario cross
    a continue-as-new."""
    yield fresh_url(
        tmp_path, payload_threshold=0, history_limit=HISTORY_LIMIT, heartbeat_timeout=HEARTBEAT
    )


def corrupt_event(url: str, run_id: str, seq: int) -> None:
    """Overwrite the stored-aside data of history event ``seq`` of ``run_id`` with text
    that is not JSON (Temporal's own history is immutable; what can rot is ours)."""
    import asyncio

    from temporalio.client import Client

    from perdure_temporal.history import read_history
    from perdure_temporal.payloads import DirectoryPayloads
    from perdure_temporal.url import TemporalUrl

    config = TemporalUrl.parse(url)

    async def find() -> str | None:
        # Read Temporal's event history itself: no worker needed (the test's own
        # worker is blocked while this runs), and nothing of ours in between.
        client = await Client.connect(config.target, namespace=config.namespace)
        history = await read_history(client, f"{config.id_prefix}{run_id}")
        if seq >= len(history):
            raise LookupError(f"{url}: run {run_id!r} has no history event #{seq}")
        ref: str | None = history[seq].get("data_ref")
        return ref

    # Tests call this from inside their event loop: run the lookup on a loop of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ref = pool.submit(asyncio.run, find()).result()
    if ref is None:
        raise LookupError(f"{url}: event #{seq} of {run_id!r} is inline, not stored aside")
    DirectoryPayloads(config.payloads).path(ref).write_bytes(NOT_JSON)
