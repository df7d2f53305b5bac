"""The perdure test matrix.

Every session runs inside the one locked uv environment (`.venv`, from `uv.lock`) via
`uv run`, so nox creates no virtualenvs of its own and all sessions see the same pins.

    nox -s ci                 lint, types and tests (the README's test command)
    nox -s tests -- -k name   extra arguments go to pytest
    PERDURE_TEST_STORES=sqlite nox -s tests
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nox

ROOT = Path(__file__).parent
UV_RUN = ("uv", "run", "--all-packages", "--all-extras", "--group", "dev")
LINT_PATHS = ("packages", "tests", "benchmarks", "noxfile.py")
DEFAULT_STORES = "sqlite,postgresql,dbos+sqlite,dbos+postgresql,temporal"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

nox.options.default_venv_backend = "none"
nox.options.sessions = ["ci"]


def _run(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    session.run(*UV_RUN, *args, env=env, external=True)


@contextlib.contextmanager
def _temporal_dev_server(session: nox.Session) -> Iterator[str]:
    """One real Temporal dev server for the whole test session (every xdist worker
    and every subprocess of a test talk to it); yields its ``host:port``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [*UV_RUN, "python", "-m", "perdure_temporal.devserver", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "Temporal dev server" not in line:
            session.error(f"the Temporal dev server did not start: {line!r}")
        session.log(line.strip())
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def _pytest(session: nox.Session, stores: str) -> None:
    env = {
        "PERDURE_TEST_STORES": stores,
        "PERDURE_TEST_POSTGRES_URL": os.environ.get(
            "PERDURE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL
        ),
    }
    args = session.posargs or ["-n", "2"]
    with contextlib.ExitStack() as stack:
        if "temporal" in stores.split(",") and not os.environ.get("PERDURE_TEST_TEMPORAL"):
            env["PERDURE_TEST_TEMPORAL"] = stack.enter_context(_temporal_dev_server(session))
        _run(session, "pytest", *args, env=env)


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    _run(session, "ruff", "check", *paths)
    _run(session, "ruff", "format", "--check", *paths)


@nox.session(python=False)
def types(session: nox.Session) -> None:
    """pyright, strict on packages/core/src/perdure (config in pyproject.toml)."""
    _run(session, "pyright", *session.posargs)


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """All tests on every column of the matrix (or the stores PERDURE_TEST_STORES
    names, e.g. sqlite,postgresql)."""
    _pytest(session, os.environ.get("PERDURE_TEST_STORES", DEFAULT_STORES))


@nox.session(python=False)
def tests_sqlite(session: nox.Session) -> None:
    """All tests, store matrix restricted to SQLite."""
    _pytest(session, "sqlite")


@nox.session(python=False)
def tests_postgresql(session: nox.Session) -> None:
    """All tests, store matrix restricted to PostgreSQL."""
    _pytest(session, "postgresql")


@nox.session(python=False)
def tests_temporal(session: nox.Session) -> None:
    """All tests, store matrix restricted to Temporal (one dev server for the session)."""
    _pytest(session, "temporal")


@nox.session(python=False)
def tests_dbos(session: nox.Session) -> None:
    """All tests, store matrix restricted to DBOS (SQLite and PostgreSQL databases)."""
    _pytest(session, "dbos+sqlite,dbos+postgresql")


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """The side-by-side benchmarks (python -m benchmarks): writes benchmarks/RESULTS.md.
    `nox -s bench -- --quick` for a smoke run with small counts."""
    _run(session, "python", "-m", "benchmarks", *session.posargs)


@nox.session(python=False)
def ci(session: nox.Session) -> None:
    """lint, then types, then tests; all three run, and any failure fails the whole."""
    for name in ("lint", "types", "tests"):
        session.notify(name)
