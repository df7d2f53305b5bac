"""The perdure test matrix.

Every session runs inside the one locked uv environment (`.venv`, from `uv.lock`) via
`uv run`, so nox creates no virtualenvs of its own and all sessions see the same pins.

    nox -s ci                 lint, types and tests (the README's test command)
    nox -s langgraph_suite    LangGraph's own tests with PerdureSaver swapped in (slow)
    nox -s langgraph_oldest   tests/langgraph on the oldest LangGraph we support (in ci)
    nox -s tests -- -k name   extra arguments go to pytest
    PERDURE_TEST_STORES=sqlite nox -s tests
    nox -s chaos -- --kills 200   the long SIGKILL + substrate-restart soak, one table
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tarfile
import tempfile
import xml.etree.ElementTree as ET
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _temporal_dev_server(session: nox.Session) -> Iterator[dict[str, str]]:
    """One real Temporal dev server for the whole test session (every xdist worker
    and every subprocess of a test talk to it); yields the environment that names its
    ``host:port`` and its Prometheus metrics' ``host:port``."""
    port, metrics = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            *UV_RUN,
            "python",
            "-m",
            "perdure_temporal.devserver",
            "--port",
            str(port),
            "--metrics-port",
            str(metrics),
        ],
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
        yield {
            "PERDURE_TEST_TEMPORAL": f"127.0.0.1:{port}",
            "PERDURE_TEST_TEMPORAL_METRICS": f"127.0.0.1:{metrics}",
        }
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
            env.update(stack.enter_context(_temporal_dev_server(session)))
        _run(session, "pytest", *args, env=env)


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    _run(session, "ruff", "check", *paths)
    _run(session, "ruff", "format", "--check", *paths)


@nox.session(python=False)
def types(session: nox.Session) -> None:
    """pyright: strict on packages/core/src/perdure, basic on the adapters (pyproject.toml)."""
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
def chaos(session: nox.Session) -> None:
    """The long chaos soak: `nox -s chaos -- --kills 200` SIGKILLs that many driving
    processes per column (PERDURE_TEST_STORES, default every column) and restarts each
    substrate mid-run, then prints one table (runs, kills, lost, duplicates, ...)."""
    stores = os.environ.get("PERDURE_TEST_STORES", DEFAULT_STORES)
    # Its own file per soak when given (two soaks at once must not share one).
    report = Path(os.environ.get("PERDURE_CHAOS_REPORT") or ROOT / ".nox-chaos.jsonl")
    report.unlink(missing_ok=True)
    env = {
        "PERDURE_TEST_STORES": stores,
        "PERDURE_CHAOS_REPORT": str(report),
        "PERDURE_TEST_POSTGRES_URL": os.environ.get(
            "PERDURE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL
        ),
    }
    scenarios = ["tests/conformance/test_chaos.py", "tests/conformance/test_substrate_restarts.py"]
    with contextlib.ExitStack() as stack:
        if "temporal" in stores.split(",") and not os.environ.get("PERDURE_TEST_TEMPORAL"):
            env.update(stack.enter_context(_temporal_dev_server(session)))
        try:
            _run(
                session,
                "pytest",
                *scenarios,
                "--timeout",
                "0",
                "-q",
                *session.posargs,
                env=env,
            )
        finally:
            if report.exists():
                _run(session, "python", "-m", "perdure.testing.chaos", "report", str(report))


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """The side-by-side benchmarks (python -m benchmarks): writes benchmarks/RESULTS.md.
    `nox -s bench -- --quick` for a smoke run with small counts."""
    _run(session, "python", "-m", "benchmarks", *session.posargs)


@nox.session(python=False)
def bench_temporal(session: nox.Session) -> None:
    """Issue #15's Temporal benchmark, (a)-(d), in one run on one dev server
    (python -m benchmarks.temporal_all): one side-by-side table, one JSON
    (benchmarks/results/temporal_all.json unless `-- --json PATH` says otherwise)."""
    args = session.posargs
    if "--json" not in args:
        args = [*args, "--json", "benchmarks/results/temporal_all.json"]
    _run(session, "python", "-m", "benchmarks.temporal_all", *args)


#: The slice of LangGraph's own tests run with PerdureSaver (issue 11).
LANGGRAPH_SUITE = (
    "test_pregel.py",
    "test_pregel_async.py",
    "test_time_travel*.py",
    "test_subgraph_persistence*.py",
    "test_interruption.py",
    "test_interrupt_state.py",
    "test_strict_resume.py",
    "test_large_cases*.py",
    "test_pydantic.py",
    "test_delta_channel_*.py",
)
#: What LangGraph's test suite needs beyond our environment.
LANGGRAPH_SUITE_DEPS = ("pytest-mock", "syrupy", "redis", "pycryptodome", "pytest-dotenv")


@nox.session(python=False)
def langgraph_suite(session: nox.Session) -> None:
    """LangGraph's own tests, from the sdist of the installed version, with their
    checkpointer fixtures extended by PerdureSaver on SQLite and on PostgreSQL; prints
    the paired counts against SqliteSaver and fails if ours fails a test it passes.
    Extra arguments go to pytest (e.g. `-- -k interrupt`)."""
    import glob
    import tarfile
    import tempfile

    version = subprocess.run(
        [*UV_RUN, "python", "-c", "import importlib.metadata as m; print(m.version('langgraph'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    suite_dir = ROOT / "tests" / "langgraph_suite"
    with tempfile.TemporaryDirectory(prefix="langgraph-suite-") as tmp:
        session.run(
            "uvx", "pip", "download", "--no-deps", "--no-binary", ":all:", "--dest", tmp,
            f"langgraph=={version}", external=True,
        )  # fmt: skip
        [sdist] = glob.glob(os.path.join(tmp, f"langgraph-{version}.tar.gz"))
        with tarfile.open(sdist) as archive:
            archive.extractall(tmp, filter="data")
        src = Path(tmp) / f"langgraph-{version}"
        # the installed langgraph is the one under test, not the sdist's copy of it
        subprocess.run(["rm", "-rf", str(src / "langgraph")], check=True)
        with (src / "tests" / "conftest.py").open("a", encoding="utf-8") as conftest:
            conftest.write("\nfrom perdure_suite import *  # noqa: E402,F403 (perdure)\n")
        report = Path(tmp) / "report.jsonl"
        tests = sorted(
            {p for pattern in LANGGRAPH_SUITE for p in glob.glob(str(src / "tests" / pattern))}
        )
        env = {
            "NO_DOCKER": "true",
            "PYTHONPATH": str(suite_dir),
            "PERDURE_SUITE_REPORT": str(report),
            "PERDURE_TEST_POSTGRES_URL": os.environ.get(
                "PERDURE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL
            ),
        }
        with_deps = [arg for dep in LANGGRAPH_SUITE_DEPS for arg in ("--with", dep)]
        args = session.posargs or ["-n", "2", "-q", "-p", "no:cacheprovider"]
        pytest = [
            "uv", "run", "--project", str(ROOT), "--all-packages", "--all-extras", "--group",
            "dev", *with_deps, "python", "-m", "pytest", "-p", "perdure_suite",
        ]  # fmt: skip
        session.chdir(src)
        session.run(*pytest, *args, *tests, env=env, external=True, success_codes=[0, 1])
        # A test ours fails and SqliteSaver passes is run again alone (no xdist, nothing
        # else of the suite beside it), up to LANGGRAPH_SUITE_RERUNS times: LangGraph's
        # suite has assertions on timings and on orders within 10 ms windows, which a
        # loaded machine loses. The counts show both passes; a test that fails alone too
        # stays a failure.
        rerun = Path(tmp) / "rerun.jsonl"
        for _ in range(LANGGRAPH_SUITE_RERUNS):
            failing = subprocess.run(
                [*UV_RUN, "python", str(suite_dir / "paired_counts.py"), str(report),
                 "--rerun", str(rerun), "--list-failing"],
                env={**os.environ, **env}, cwd=ROOT, check=True, capture_output=True, text=True,
            ).stdout.split()  # fmt: skip
            if not failing:
                break
            session.run(
                *pytest, "-p", "no:xdist", "-q", "-p", "no:cacheprovider", *failing,
                env={**env, "PERDURE_SUITE_REPORT": str(rerun)}, external=True,
                success_codes=[0, 1],
            )  # fmt: skip
        session.chdir(ROOT)
        _run(
            session, "python", str(suite_dir / "paired_counts.py"), str(report),
            "--rerun", str(rerun), env=env,
        )  # fmt: skip


#: How many times a test that fails only on ours is run again alone.
LANGGRAPH_SUITE_RERUNS = 3


#: The oldest LangGraph perdure-langgraph supports (its pyproject's lower bound); the
#: locked one (the newest) is what every other session runs.
LANGGRAPH_OLDEST = "1.2.20"


@nox.session(python=False)
def langgraph_oldest(session: nox.Session) -> None:
    """tests/langgraph on SQLite with the oldest supported LangGraph (the crash tests,
    which the locked version runs on every column, are left out to keep this short)."""
    env = {"PERDURE_TEST_STORES": "sqlite"}
    args = session.posargs or ["-n", "2", "-q", "-k", "not sigkill and not survives"]
    session.run(
        *UV_RUN, "--with", f"langgraph=={LANGGRAPH_OLDEST}", "pytest", "tests/langgraph",
        *args, env=env, external=True,
    )  # fmt: skip


@nox.session(python=False)
def ci(session: nox.Session) -> None:
    """lint, types, tests, then the adapters' tests on the oldest framework releases; all
    run, and any failure fails the whole."""
    for name in ("lint", "types", "tests", "agents_oldest", "langgraph_oldest"):
        session.notify(name)


#: The oldest openai-agents release perdure-openai-agents supports (its pyproject's
#: lower bound); the newest is the locked one every other session uses.
AGENTS_OLDEST = "0.21.0"


@nox.session(python=False)
def agents_oldest(session: nox.Session) -> None:
    """The adapter's in-process tests on SQLite with the oldest supported openai-agents
    release (the crash tests run on the locked, newest one in `tests`)."""
    env = {"PERDURE_TEST_STORES": "sqlite"}
    args = session.posargs or ["-n", "2", "-q"]
    withs = ("--with", f"openai-agents=={AGENTS_OLDEST}")
    tests = (
        "tests/openai_agents/test_durable_runner.py",
        "tests/openai_agents/test_agents_compat.py",
    )
    _run(session, *withs, "pytest", *tests, *args, env=env)


#: The Agents SDK test files whose Runner calls ``nox -s agents_suite`` routes to
#: DurableRunner (paths inside the SDK's sdist).
AGENTS_SUITE_TESTS = (
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_guardrails.py",
    "tests/test_max_turns.py",
    "tests/test_tool_use_behavior.py",
    "tests/test_run_hooks.py",
    "tests/test_agent_hooks.py",
    "tests/test_global_hooks.py",
    "tests/test_stream_events.py",
    "tests/test_call_model_input_filter.py",
    "tests/test_handoff_history_duplication.py",
    "tests/test_handoff_prompt.py",
    "tests/test_handoff_tool.py",
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_session_context_wrapper.py",
    "tests/memory/test_session_persistence_sanitize.py",
    "tests/test_run_state.py",
    "tests/test_hitl_error_scenarios.py",
    "tests/test_hitl_session_scenario.py",
    "tests/test_hitl_utils.py",
    "tests/test_agent_as_tool.py",
)
#: What the SDK's tests import beyond the SDK itself (its dev group, the part these use).
AGENTS_SUITE_DEPS = ("pytest-mock", "inline-snapshot", "aiosqlite")


@nox.session(python=False)
def agents_suite(session: nox.Session) -> None:
    """The OpenAI Agents SDK's own runner tests, from the sdist of the installed version,
    once with plain Runner and once with every Runner call routed to DurableRunner
    (perdure_openai_agents.suite_route); prints the paired counts and writes the failures
    to agents-suite-report.txt. `-- -k name` narrows both runs."""
    version = subprocess.check_output(
        [*UV_RUN, "python", "-c", "import agents.version as v; print(v.__version__)"], text=True
    ).strip()
    with tempfile.TemporaryDirectory(prefix="agents-suite-") as tmp:
        sdk = _download_sdist_tests(session, Path(tmp), version)
        session.log(f"openai-agents {version} tests in {sdk}")
        session.chdir(sdk)
        withs = [arg for dep in AGENTS_SUITE_DEPS for arg in ("--with", dep)]
        base = [*UV_RUN, "--project", str(ROOT), *withs, "pytest", *AGENTS_SUITE_TESTS]
        base += ["-q", "-n", "2", "-p", "no:cacheprovider", "-o", "addopts=", *session.posargs]
        outcomes = {}
        for mode in ("plain", "durable"):
            xml = Path(tmp) / f"{mode}.xml"
            args = [*base, f"--junitxml={xml}"]
            env = {"PERDURE_SUITE_REACHED": str(Path(tmp) / "reached")}
            if mode == "durable":
                args += ["-p", "perdure_openai_agents.suite_route"]
            session.run(*args, env=env, external=True, success_codes=[0, 1])
            outcomes[mode] = xml
        session.chdir(ROOT)
        report = _paired_report(outcomes["plain"], outcomes["durable"], Path(tmp) / "reached")
        (ROOT / "agents-suite-report.txt").write_text(report)
        print(report.split("\n\n", 1)[0])


def _download_sdist_tests(session: nox.Session, into: Path, version: str) -> Path:
    """The openai-agents sdist at ``version`` from PyPI (pip's own client), unpacked."""
    session.run(
        "uvx", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
        f"openai-agents=={version}", "-d", str(into), external=True,
    )  # fmt: skip
    (archive,) = into.glob("openai_agents-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / archive.name.removesuffix(".tar.gz")


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | skipped, first line of the failure)."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            message = (bad.get("message") or "").strip().splitlines() or [""]
            out[test] = ("failed", message[0][:300])
        elif case.find("skipped") is not None:
            out[test] = ("skipped", "")
        else:
            out[test] = ("passed", "")
    return out


def _junit_id(nodeid: str) -> str:
    """``tests/a.py::C::t[x]`` as junit names it: ``tests.a.C::t[x]``."""
    parts = nodeid.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[1:-1]]) + "::" + parts[-1]


def _paired_report(plain: Path, durable: Path, reached: Path) -> str:
    base, routed = _outcomes(plain), _outcomes(durable)
    reached_ids = {
        _junit_id(line)
        for f in reached.parent.glob(reached.name + ".*")
        for line in f.read_text().splitlines()
    }
    passed = {t for t, (o, _) in base.items() if o == "passed"}
    both = {t for t in passed if routed.get(t, ("missing", ""))[0] == "passed"}
    lost = sorted(passed - both)
    through = {t for t in passed if t in reached_ids}
    through_ok = through & both
    pct = 100.0 * len(both) / max(len(passed), 1)
    pct_through = 100.0 * len(through_ok) / max(len(through), 1)
    head = (
        f"agents_suite: plain Runner passes {len(passed)} of {len(base)} tests; "
        f"with DurableRunner {len(both)} of those pass ({pct:.1f}%).\n"
        f"  {len(through)} of them reached DurableRunner; {len(through_ok)} of those pass "
        f"({pct_through:.1f}%)."
    )
    lines = [f"{t}\n    {routed.get(t, ('missing', 'not run'))[1]}" for t in lost]
    return head + "\n\nFailing only with DurableRunner:\n" + "\n".join(lines) + "\n"
