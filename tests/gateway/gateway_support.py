"""Gateway processes for the tests: ``perdure gateway serve`` in a child process, ready
once it printed its address (it prints it after its ledger opened)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from perdure.testing import Process, Processes, Receiver


@dataclass
class Gateway:
    process: Process
    url: str

    def kill(self) -> None:
        self.process.kill()

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/_perdure/status", timeout=30).json()


def start_gateway(processes: Processes, receiver: Receiver, *extra: str) -> Gateway:
    """``perdure gateway serve`` with the receiver as upstream ``recv``, on a free port."""
    proc = processes.spawn(
        "-m",
        "perdure",
        "gateway",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        f"recv={receiver.url}",
        "--url",
        processes.url,
        *extra,
    )
    line = first_line(proc, " on http://")
    return Gateway(proc, line.split(" on ", 1)[1].split()[0])


def first_line(proc: Process, expected: str) -> str:
    """The line ``proc`` prints to say it is ready (it prints it once listening); waits
    for it, or fails with the output if the process exits without printing it."""
    proc.wait_output(expected)
    return next(line for line in proc.output().splitlines() if expected in line)


def wait_for_waiters(gateway: Gateway, key: str, count: int, timeout: float = 60.0) -> None:
    """Until ``gateway`` reports ``count`` duplicates of ``recv/key`` waiting on the first."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = gateway.status()["waiting"].get(f"recv/{key}", 0)
        if waiting >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gateway.url}: {waiting} waiter(s) on {key!r}, not {count}")
        time.sleep(0.02)


def cli_json(processes: Processes, *args: str) -> Any:
    done = processes.cli(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)
