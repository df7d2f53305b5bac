"""Random SIGKILLs of the driving processes of a 30-step mixed run, two workers racing,
on every column (``perdure.testing.chaos``). The receivers count every effect outside
the workers; the contract allows none lost, duplicated or failed, and none stuck.

``nox -s chaos -- --kills 200`` runs the long soak and prints the table per column.
"""

from __future__ import annotations

from typing import Any

from perdure.testing import Processes, Receiver
from perdure.testing.chaos import Chaos


async def test_random_sigkills_lose_duplicate_and_fail_nothing(
    perdure_backend: Any,
    perdure_store: str,
    receiver: Receiver,
    processes: Processes,
    chaos_kills: int,
) -> None:
    chaos = Chaos(perdure_backend, receiver, processes, column=perdure_store)
    runs = max(1, chaos_kills // 4)
    tally = await chaos.run(runs=runs, kills=chaos_kills)
    tally.record()
    print(tally)
    assert tally.ok(), tally
    assert tally.kills >= 1, tally  # the scenario did kill (a point may find no one alive)
