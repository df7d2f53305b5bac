"""Helpers of the console tests: a real `perdure console` process on a store."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from perdure.testing.plugin import store_names

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SECRET = "console-test-secret"

#: Scenarios beyond the first run on the embedded columns only (one each elsewhere).
EMBEDDED = [name for name in store_names() if name in ("sqlite", "postgresql")]
#: For tests whose subject does not depend on the store: the first embedded column.
one_embedded_store = pytest.mark.parametrize("embedded_url", EMBEDDED[:1], indirect=True)
HERE = Path(__file__).parent


@dataclass(frozen=True)
class ConsoleProcess:
    base: str
    process: subprocess.Popen[str]


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
