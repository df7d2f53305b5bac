"""``perdure runs prune`` and a worker's retention delete a thread's checkpoints with it.

A durable thread's turns are runs ``thread#n`` (``durable``); its checkpoints are the
thread's state, which each later turn continues from. So the checkpoints go when the
thread's last remaining turn is pruned: with every turn of a thread pruned, nothing of
it is left in ``PerdureSaver``'s tables; while a later turn (or one not pruned because
of ``--status``) remains, the thread keeps its checkpoints. Only perdure's own saver on
the backend's SQL database (``registry.state_url``) is purged: a graph compiled with
another checkpointer keeps its checkpoints where that checkpointer put them.
"""

from __future__ import annotations

from collections.abc import Sequence

from perdure.spi import Backend, ConfigurationError, RunInfo, RunNotFoundError, state_url
from perdure_langgraph.durable import TURN_KEY, WORKFLOW_NAME, _spec_of, turn_run_id
from perdure_langgraph.saver import PerdureSaver

__all__ = ["purge"]


def _thread_of(info: RunInfo) -> str:
    thread = _spec_of(info).get("thread_id")
    return str(thread) if thread else info.run_id.rpartition("#")[0]


async def purge(backend: Backend, runs: Sequence[RunInfo]) -> None:
    """Delete the checkpoints of every thread whose turns are all among ``runs`` (which
    are about to be deleted) or already gone."""
    doomed = {info.run_id for info in runs if info.workflow == WORKFLOW_NAME}
    threads = sorted({_thread_of(info) for info in runs if info.run_id in doomed})
    if not threads:
        return
    try:
        state_url(backend.url)
    except ConfigurationError:
        return  # no SQL database for adapters here: the graphs had checkpointers of their own
    saver = PerdureSaver.from_url(backend.url)
    try:
        for thread in threads:
            if not await _turn_remains(backend, saver, thread, doomed):
                await saver.adelete_thread(thread)
    finally:
        await saver.aclose()


async def _turn_remains(
    backend: Backend, saver: PerdureSaver, thread: str, doomed: set[str]
) -> bool:
    """Whether a turn of ``thread`` outside ``doomed`` is still in the backend: turns
    1 to the last one a checkpoint names, and any started after it."""
    latest = await saver.aget_tuple({"configurable": {"thread_id": thread}})
    marked = (latest.metadata or {}).get(TURN_KEY) if latest is not None else None
    last = marked if isinstance(marked, int) else 0
    turn = 1
    while True:
        run_id = turn_run_id(thread, turn)
        try:
            await backend.get_run(run_id)
        except RunNotFoundError:
            if turn > last:
                return False
        else:
            if run_id not in doomed:
                return True
        turn += 1
