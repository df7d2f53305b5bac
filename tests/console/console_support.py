"""Helpers of the console tests: a real `perdure console` process on a store."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from perdure._console import ConsoleSettings, create_app
from perdure.testing.plugin import store_names

SECRET = "console-test-secret"
#: The scrape token of every test console's /metrics.
METRICS_TOKEN = "console-test-metrics-token"
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}

#: Scenarios beyond the first run on the embedded columns only (one each elsewhere).
EMBEDDED = [name for name in store_names() if name in ("sqlite", "postgresql")]
#: For tests whose subject does not depend on the store: the first embedded column.
one_embedded_store = pytest.mark.parametrize("embedded_url", EMBEDDED[:1], indirect=True)
HERE = Path(__file__).parent


@dataclass(frozen=True)
class ConsoleProcess:
    """A running console: its own `perdure console` process, or served in the test's
    event loop (``process`` None) where a process would only add start-up time."""

    base: str
    process: subprocess.Popen[str] | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _await_listening(proc: subprocess.Popen[str], base: str, deadline: float) -> None:
    """Until the console answers (or its process died, or ``deadline`` passed)."""
    with httpx.Client(timeout=2.0) as client:
        while True:
            if proc.poll() is not None:
                _, err = proc.communicate()
                raise AssertionError(f"perdure console exited {proc.returncode}: {err}")
            try:
                if client.get(f"{base}/login").status_code == 200:
                    return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            # connection refused comes back at once: pace the retries of a starting server
            time.sleep(0.1)


def console_process(url: str) -> Iterator[ConsoleProcess]:
    port = free_port()
    env = {
        **os.environ,
        "PERDURE_CONSOLE_SECRET": SECRET,
        "PERDURE_METRICS_TOKEN": METRICS_TOKEN,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "perdure", "console", "--url", url, "--port", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _await_listening(proc, base, time.monotonic() + 60)
        yield ConsoleProcess(base, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def console_in_loop(url: str, **settings: Any) -> AsyncIterator[ConsoleProcess]:
    """The console app (its own backend, opened from ``url``) under uvicorn in this
    event loop: the same app `perdure console` serves, without a process start.
    ``settings`` are more ``ConsoleSettings`` fields."""
    app = create_app(
        ConsoleSettings(**{"metrics_token": METRICS_TOKEN, **settings}, secret=SECRET, url=url)
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 60
    while not server.started:
        if serving.done():
            serving.result()  # raises what stopped it
            raise AssertionError("the console stopped before it listened")
        assert time.monotonic() < deadline, "the console did not listen within 60s"
        await asyncio.sleep(0.01)  # uvicorn sets `started` once bound: look again
    try:
        yield ConsoleProcess(f"http://127.0.0.1:{server.config.port}")
    finally:
        server.should_exit = True
        await serving
