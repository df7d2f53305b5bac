"""Chaos for any backend: SIGKILLs at random points of a 30-step mixed run, two workers
racing, substrate restarts; every effect counted at the receivers, outside the workers.

The run (``perdure.chaos``) does 30 steps — pure steps, effects at a receiver that
dedupes, effects at one that does not (intent before action) — with a durable sleep and
a wait for a signal that another process delivers. ``Chaos.run`` starts runs from
starter processes, keeps two ``perdure worker`` processes racing, SIGKILLs a random
driving process each time the receivers have seen a randomly chosen number of requests
(a replacement takes its place), acts as the operator for a non-idempotent effect left
with an open intent (reconciles it from the receiver's ledger), optionally takes the
substrate away once mid-run, and tallies what the contract forbids: lost runs,
duplicated effects, runs failed that user code did not fail, runs stuck.

    python -m perdure.testing.chaos report FILE   # the table of a soak's JSON lines
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import perdure
from perdure._backend import Backend
from perdure._records import EventKind, RunInfo, RunStatus
from perdure._semantics.attention import Attention
from perdure.testing.patience import Patience
from perdure.testing.processes import Process, Processes
from perdure.testing.receivers import Receiver, post

STEPS = 30
SLEEP_AT = 10
SIGNAL_AT = 20
SIGNAL = "go"
WORKFLOW = "perdure.chaos"
MODULE = "perdure.testing.chaos"
#: Runs in flight at once; the rest start as earlier ones finish.
WAVE = 4
EXPECTED = {"pure": 10, "charge": 10, "email": 10}
#: The characters of each process's output shown when a scenario found problems.
OUTPUT_TAIL = 4000


def _receiver(path: str) -> str:
    return f"{os.environ['PERDURE_TEST_RECEIVER']}/{path}"


@perdure.step
def chaos_pure(tag: str, i: int) -> int:
    post(_receiver("plain/pure"), {"run": tag, "i": i})
    return i


@perdure.effect(idempotent_receiver=True)
def chaos_charge(tag: str, i: int) -> str:
    answer = post(_receiver("dedup/charge"), {"run": tag, "i": i}, key=perdure.idempotency_key())
    return str(answer["id"])


@perdure.effect()  # the receiver cannot dedupe: intent before action
def chaos_email(tag: str, i: int) -> str:
    answer = post(_receiver("plain/email"), {"run": tag, "i": i}, key=perdure.idempotency_key())
    return str(answer["id"])


@perdure.workflow(name=WORKFLOW)
async def chaos_run(tag: str) -> dict[str, int]:
    done = {"pure": 0, "charge": 0, "email": 0}
    for i in range(STEPS):
        if i == SLEEP_AT:
            await perdure.sleep(0.2)
        if i == SIGNAL_AT:
            await perdure.wait_for_signal(SIGNAL)
        if i % 3 == 0:
            await chaos_pure(tag, i)
            done["pure"] += 1
        elif i % 3 == 1:
            await chaos_charge(tag, i)
            done["charge"] += 1
        else:
            await chaos_email(tag, i)
            done["email"] += 1
    return done


@dataclass
class Tally:
    """What one chaos scenario on one column did and found."""

    column: str
    scenario: str
    runs: int
    kills: int = 0
    lost: int = 0
    duplicates: int = 0
    non_idempotent_duplicates: int = 0
    failed: int = 0
    stuck: int = 0
    needs_attention: int = 0
    #: Runs the scenario never got to start: it gave up first (a harness failure).
    not_started: int = 0
    wall: float = 0.0
    #: Seconds from the substrate's return to the first step that ran after it.
    resumed_after: float | None = None
    #: Runs started and not finished when the substrate went away (outage scenarios).
    in_flight_at_outage: int = 0
    #: Whether a driving process logged that the store went away (outage scenarios).
    outage_logged: bool = False
    problems: list[str] = field(default_factory=lambda: [])

    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicates
            or self.non_idempotent_duplicates
            or self.failed
            or self.stuck
            or self.not_started
            or self.problems
        )

    def record(self) -> None:
        """Append this tally to ``$PERDURE_CHAOS_REPORT`` (JSON lines), if set."""
        path = os.environ.get("PERDURE_CHAOS_REPORT")
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(asdict(self)) + "\n")


Outage = Callable[[], Awaitable[float]]


class Chaos:
    """Drives one chaos scenario against ``backend`` (the test process's view)."""

    def __init__(
        self,
        backend: Backend,
        receiver: Receiver,
        processes: Processes,
        *,
        column: str,
        seed: int | None = None,
        workers: int = 2,
    ) -> None:
        self.backend = backend
        self.receiver = receiver
        self.processes = processes
        self.column = column
        self.rng = random.Random(seed)
        self.workers_wanted = workers
        self.workers: list[Process] = []
        self.every_worker: list[Process] = []
        self.every_starter: list[Process] = []
        self.starters: dict[str, Process] = {}
        #: Runs the backend has shown to exist at least once.
        self.seen: set[str] = set()
        #: The run each starter process (by pid) was started for.
        self.run_of: dict[int, str] = {}

    def _worker(self) -> None:
        worker = self.processes.worker(MODULE)
        self.workers.append(worker)
        self.every_worker.append(worker)

    def _starter(self, run_id: str) -> None:
        starter = self.processes.drive(MODULE, WORKFLOW, run_id, run_id=run_id)
        self.run_of[starter.pid] = run_id
        self.starters[run_id] = starter
        self.every_starter.append(starter)

    def _kill_one(self) -> bool:
        live = [p for p in self.workers if p.popen.poll() is None]
        live += [p for p in self.starters.values() if p.popen.poll() is None]
        if not live:
            return False
        victim = self.rng.choice(live)
        victim.kill()
        if victim in self.workers:
            self.workers.remove(victim)
            self._worker()  # the next one races the survivor
        else:
            # Starting is idempotent: a new starter makes sure the run exists.
            run_id = next(r for r, p in self.starters.items() if p is victim)
            self._starter(run_id)
        return True

    async def run(
        self,
        *,
        runs: int,
        kills: int,
        scenario: str = "kills",
        outage: Outage | None = None,
        stall: float = 180.0,
    ) -> Tally:
        """Start ``runs``, SIGKILL ``kills`` driving processes along the way, and tally.

        It gives up only after ``stall`` seconds in which nothing moved (no request at
        the receivers, no run changing status), never at a fixed deadline: a loaded
        machine makes a soak slow, not wrong. A run still unfinished then is ``stuck``
        (it stopped moving for that long); one never started is ``not_started`` (the
        scenario gave up first); ``lost`` means a run whose start was acknowledged (a
        starter exited 0, or it was seen) is unknown to the backend."""
        tally = Tally(self.column, scenario, runs)
        began = time.monotonic()
        prefix = f"chaos-{self.rng.randrange(16**6):06x}"
        run_ids = [f"{prefix}-{i}" for i in range(runs)]
        expected_requests = runs * STEPS
        points = sorted(
            self.rng.sample(range(1, expected_requests), min(kills, expected_requests - 1))
        )
        # Early in the runs (before the durable sleep and far from the signal wait), so
        # the runs are mid-step when the substrate returns and ``resumed_after`` times
        # the backend's return, not a signal's sender starting up on a loaded machine.
        outage_at = (
            self.rng.randrange(expected_requests // 8, expected_requests // 4) if outage else None
        )
        for _ in range(self.workers_wanted):
            self._worker()
        waiting = list(run_ids)
        started: list[str] = []
        signals: dict[str, Process] = {}
        reconciled: set[tuple[str, int]] = set()
        back_at: float | None = None
        patience = Patience(stall)
        while True:
            infos = await self._infos(started)
            self.seen.update(infos)
            in_flight = [r for r in started if not _finished(infos.get(r))]
            while waiting and len(in_flight) < WAVE:
                run_id = waiting.pop(0)
                self._starter(run_id)
                started.append(run_id)
                in_flight.append(run_id)
            arrived = len(self.receiver.arrivals)
            if points and arrived >= points[0] and self._kill_one():
                points.pop(0)  # no one alive to kill: at the next look, not dropped
                tally.kills += 1
            if outage_at is not None and arrived >= outage_at:
                outage_at = None
                assert outage is not None
                tally.in_flight_at_outage = len(in_flight)
                back_at = await outage()
            for run_id in started:
                starter = self.starters[run_id]
                if run_id not in infos and starter.popen.poll() not in (None, 0):
                    self._starter(run_id)  # it could not reach the substrate: start again
            for run_id, info in infos.items():
                sender = signals.get(run_id)
                if sender is not None and sender.popen.poll() not in (None, 0):
                    sender = None  # it failed (the substrate was away): send it again
                if (
                    info.status is RunStatus.SUSPENDED
                    and info.waiting_for == SIGNAL
                    and sender is None
                ):
                    # From another process, as a webhook or an operator would.
                    signals[run_id] = self.processes.spawn(
                        "-m",
                        "perdure",
                        "signal",
                        run_id,
                        SIGNAL,
                        "--by",
                        "chaos-webhook",
                        "--url",
                        self.processes.url,
                    )
                elif info.status is RunStatus.NEEDS_ATTENTION:
                    await self._reconcile(info, reconciled, tally)
            if not waiting and all(_finished(infos.get(r)) for r in started):
                break
            statuses = tuple(None if i is None else i.status for i in map(infos.get, started))
            patience.observe((len(self.receiver.arrivals), len(started), statuses))
            if patience.expired():
                tally.not_started = len(waiting)
                if waiting:
                    tally.problems.append(
                        f"{len(waiting)} run(s) never started: nothing moved for {stall}s"
                    )
                break
            await asyncio.sleep(0.05)  # the monitor's polling period, not a synchronisation
        tally.wall = round(time.monotonic() - began, 2)
        if back_at is not None:
            after = [t for t, _ in self.receiver.arrivals if t >= back_at]
            tally.resumed_after = round(after[0] - back_at, 3) if after else None
        await self._count(run_ids, tally)
        for proc in self.starters.values():
            proc.kill()
        for worker in self.workers:
            worker.terminate()  # a graceful stop: it drains and exits
        for proc in [*self.every_worker, *self.every_starter]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
            # rich wraps log lines to the console's width: compare without line breaks
            tally.outage_logged |= "is unavailable" in " ".join(proc.output().split())
        if tally.problems:
            # What the driving processes said: the only account of a stuck run's drive
            # that survives the scenario (pytest shows it with the failure).
            for proc in [*self.every_worker, *self.every_starter]:
                print(proc.output()[-OUTPUT_TAIL:])
        return tally

    async def _infos(self, run_ids: list[str]) -> dict[str, RunInfo]:
        infos: dict[str, RunInfo] = {}
        for run_id in run_ids:
            try:
                infos[run_id] = await self.backend.get_run(run_id)
            except LookupError:
                pass  # its starter has not created it yet
            except perdure.BackendUnavailableError:
                pass  # the substrate is away (an outage scenario): look again later
        return infos

    async def _reconcile(self, info: RunInfo, answered: set[tuple[str, int]], tally: Tally) -> None:
        """The operator's part: an effect killed between its intent and its record is
        looked up in the receiver's ledger, then marked succeeded or retried.

        Each parking is answered once: it is named by its ``needs_attention`` event, so
        a run parked again at the same step (its retry was killed mid-effect too) is
        answered again, and a status read before an answer took effect is not."""
        attention = info.attention or {}
        step_key = str(attention.get("step_key"))
        try:
            history = await self.backend.history(info.run_id)
        except perdure.BackendUnavailableError:
            return  # the substrate is away (an outage scenario): again later
        parkings = [e.seq for e in history if e.kind is EventKind.NEEDS_ATTENTION]
        if not parkings or (info.run_id, parkings[-1]) in answered:
            return
        parking = (info.run_id, parkings[-1])
        if attention.get("reason") != Attention.UNKNOWN_OUTCOME:
            tally.problems.append(f"{info.run_id} parked: {attention}")
            answered.add(parking)
            return
        # Every request that reached the receiver has been applied (none half-handled).
        if not await asyncio.to_thread(self.receiver.wait_settled, "email"):
            return  # a request is still being handled: look again
        key = f"{info.run_id}:{step_key}"
        keys = self.receiver.keys["email"]
        try:
            if key in keys:
                result = f"email-{keys.index(key) + 1}"
                await self.backend.reconcile(
                    info.run_id, step_key, "succeeded", result=result, by="chaos"
                )
            else:
                await self.backend.reconcile(info.run_id, step_key, "retry", by="chaos")
        except perdure.BackendUnavailableError:
            return  # the substrate is away: again later
        except perdure.InvalidRunStateError:
            return  # no longer parked there (the status read was stale): look again
        answered.add(parking)
        tally.needs_attention += 1

    async def _count(self, run_ids: list[str], tally: Tally) -> None:
        charges = Counter(k.partition(":")[0] for k in self.receiver.keys["charge"])
        emails = Counter(self.receiver.keys["email"])
        tally.non_idempotent_duplicates = sum(n - 1 for n in emails.values() if n > 1)
        for run_id in run_ids:
            tally.duplicates += max(0, charges[run_id] - EXPECTED["charge"])
            try:
                info = await self.backend.get_run(run_id)
            except LookupError:
                if run_id in self.seen or any(
                    p.popen.returncode == 0
                    for p in self.every_starter
                    if self.run_of[p.pid] == run_id
                ):
                    tally.lost += 1  # its start was acknowledged: the backend lost it
                    tally.problems.append(f"{run_id} was started and is unknown now")
                elif run_id in self.starters:
                    tally.stuck += 1  # its starters never got it created
                    tally.problems.append(f"{run_id}: no starter could create it")
                continue
            if info.status is RunStatus.FAILED:
                tally.failed += 1
                tally.problems.append(f"{run_id} failed: {info.error}")
            elif info.status is not RunStatus.SUCCEEDED:
                tally.stuck += 1
                tally.problems.append(f"{run_id} is {info.status.value}: {info.attention}")
            elif info.result != EXPECTED:
                tally.problems.append(f"{run_id} returned {info.result}")


def _finished(info: RunInfo | None) -> bool:
    return info is not None and info.status.terminal


COLUMNS = (
    ("column", "column"),
    ("scenario", "scenario"),
    ("runs", "runs"),
    ("kills", "kills"),
    ("lost", "lost"),
    ("duplicates", "dup"),
    ("non_idempotent_duplicates", "non-idem dup"),
    ("failed", "failed"),
    ("stuck", "stuck"),
    ("needs_attention", "needs-attention"),
    ("not_started", "not started"),
    ("wall", "wall s"),
    ("resumed_after", "resumed after s"),
)


def report(path: str) -> None:
    """Print the table of the tallies in ``path`` (one JSON object a line)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="perdure chaos")
    for _, title in COLUMNS:
        table.add_column(title, justify="left" if title in ("column", "scenario") else "right")
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            row: dict[str, Any] = json.loads(line)
            table.add_row(*("-" if row.get(k) is None else str(row[k]) for k, _ in COLUMNS))
    Console(width=160).print(table)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        sys.exit("usage: python -m perdure.testing.chaos report FILE")
    report(sys.argv[2])
