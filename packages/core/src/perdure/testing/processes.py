"""Real processes for crash tests: drive a run, run a worker or the CLI, SIGKILL them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any


class Process:
    """A child Python process; ``kill()`` is a real SIGKILL. Its output is read as it
    comes, so a test can wait for a line (``wait_output``) while it runs."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None) -> None:
        self.argv = list(argv)
        self.popen = subprocess.Popen(
            self.argv,
            env=dict(env),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._text = {"out": "", "err": ""}
        self._ended = 0  # pipes read to their end
        self._grew = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(name, pipe), daemon=True)
            for name, pipe in (("out", self.popen.stdout), ("err", self.popen.stderr))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, name: str, pipe: IO[str] | None) -> None:
        assert pipe is not None
        for line in pipe:
            with self._grew:
                self._text[name] += line
                self._grew.notify_all()
        pipe.close()
        with self._grew:
            self._ended += 1
            self._grew.notify_all()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, exactly like an OOM kill."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self._join()

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 120.0) -> int:
        """Wait for exit; the output is kept for ``output()``. Raises on timeout."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._join()
        return self.popen.returncode

    def _join(self) -> None:
        for reader in self._readers:
            reader.join()

    def wait_output(self, text: str) -> None:
        """Block until the process has written ``text`` (compared without whitespace, as
        rich wraps log lines); ``ChildProcessError`` if it exits without writing it.
        No deadline: the process's exit ends the wait."""
        wanted = "".join(text.split())

        def said() -> bool:
            return wanted in "".join(self.output().split())

        with self._grew:
            while not said():
                if self._ended == len(self._readers):
                    raise ChildProcessError(
                        f"the process exited (rc {self.popen.poll()}) without writing "
                        f"{text!r}:\n{self.output()}"
                    )
                self._grew.wait()

    def output(self) -> str:
        return f"$ {' '.join(self.argv)}\n{self._text['out']}{self._text['err']}"


class Processes:
    """Spawns perdure processes with one environment; kills leftovers on ``close``."""

    def __init__(
        self,
        url: str,
        *,
        env: Mapping[str, str] | None = None,
        pythonpath: Sequence[Path] = (),
        cwd: Path | None = None,
    ) -> None:
        self.url = url
        self.cwd = cwd
        self.env = {**os.environ, **(env or {}), "PERDURE_URL": url}
        # Let children cache bytecode: each one otherwise recompiles its imports.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        paths = [str(p) for p in pythonpath]
        if self.env.get("PYTHONPATH"):
            paths.append(self.env["PYTHONPATH"])
        self.env["PYTHONPATH"] = os.pathsep.join(paths)
        self._procs: list[Process] = []

    def spawn(self, *argv: str, env: Mapping[str, str] | None = None) -> Process:
        proc = Process([sys.executable, *argv], {**self.env, **(env or {})}, self.cwd)
        self._procs.append(proc)
        return proc

    def drive(
        self,
        module: str,
        workflow: str,
        *args: Any,
        run_id: str,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Process:
        """Start ``run_id`` in a new process that drives it to its next stop, then exits."""
        return self.spawn(
            "-m",
            "perdure.testing.drive",
            "--url",
            self.url,
            "--module",
            module,
            "--workflow",
            workflow,
            "--run-id",
            run_id,
            "--input",
            json.dumps({"args": list(args), "kwargs": kwargs}),
            env=env,
        )

    def worker(self, *modules: str, env: Mapping[str, str] | None = None) -> Process:
        """``perdure worker MODULE`` in a new process: recovers and drives runs until killed."""
        return self.spawn("-m", "perdure", "worker", *modules, "--url", self.url, env=env)

    def cli(
        self, *args: str, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run one ``perdure`` CLI command to completion."""
        return subprocess.run(
            [sys.executable, "-m", "perdure", *args, "--url", self.url],
            env={**self.env, **(env or {})},
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def close(self) -> None:
        for proc in self._procs:
            proc.kill()
        self._procs.clear()
