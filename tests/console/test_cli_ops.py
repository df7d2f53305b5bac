"""The CLI shows the console's truths and prunes: `runs list --stuck`, `stats`,
`runs prune --export`, and a worker's `--retention`."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from console_support import one_embedded_store
from console_workflows import refund
from typer.testing import CliRunner

from perdure import _retention as retention
from perdure import _url_options as url_options
from perdure._backend import Backend
from perdure._cli.app import app
from perdure._engine.backend import EmbeddedBackend
from perdure._errors import RetentionError, RunNotFoundError
from perdure._records import RunInfo, RunStatus
from perdure._registry import open_backend
from perdure._retention import export_name
from perdure.testing.processes import Processes

HERE = Path(__file__).parent


async def finished_and_waiting(backend: Backend) -> tuple[list[str], str]:
    """Two finished runs (one succeeded, one cancelled) and one waiting for approval."""
    tag = uuid.uuid4().hex[:6]
    done, cancelled, waiting = f"done-{tag}", f"cancelled-{tag}", f"waiting-{tag}"
    for run_id in (done, cancelled, waiting):
        await backend.start(refund, ("order-1", 100), {}, run_id=run_id)
    await backend.idle()
    await backend.signal(done, "approval", {"approved": False}, by="ops")
    await backend.cancel(cancelled)
    assert (await backend.wait(done, timeout=60)).status is RunStatus.SUCCEEDED
    assert (await backend.wait(cancelled, timeout=60)).status is RunStatus.CANCELLED
    assert (await backend.get_run(waiting)).status is RunStatus.SUSPENDED
    return [done, cancelled], waiting


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


class Cli:
    """The `perdure` typer app, invoked in this process (on a thread: each command runs
    its own event loop), on one store; `tests/cli` covers the real subprocesses."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def __call__(self, *args: str) -> Ran:
        result = await asyncio.to_thread(
            CliRunner().invoke, app, [*args, "--url", self.url], catch_exceptions=False
        )
        return Ran(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def cli(embedded_url: str) -> Cli:
    return Cli(embedded_url)


@pytest.fixture
def procs(embedded_url: str) -> Processes:
    return Processes(embedded_url, pythonpath=[HERE])


async def test_prune_exports_then_deletes_finished_runs_only(
    embedded: Backend, cli: Cli, tmp_path: Path
) -> None:
    finished, waiting = await finished_and_waiting(embedded)
    histories = {run_id: await embedded.history(run_id) for run_id in finished}
    kept = await embedded.history(waiting)

    refused = await cli("runs", "prune", "--older-than", "0s", "--status", "suspended")
    assert refused.returncode == 2, refused.stderr
    assert "finished runs only" in refused.stderr

    dry = await cli("runs", "prune", "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "2 succeeded/failed/cancelled run(s)" in dry.stdout
    for run_id in finished:
        await embedded.get_run(run_id)  # a dry run deletes nothing

    folder = tmp_path / "exported"
    pruned = await cli("runs", "prune", "--older-than", "0s", "--export", str(folder))
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted 2 of 2" in pruned.stdout
    for run_id in finished:
        lines = (folder / export_name(run_id)).read_text().splitlines()
        assert json.loads(lines[0])["run"]["run_id"] == run_id
        assert [json.loads(line) for line in lines[1:]] == [
            ev.to_json() for ev in histories[run_id]
        ]
        with pytest.raises(RunNotFoundError):
            await embedded.get_run(run_id)
        with pytest.raises(RunNotFoundError):  # an unknown id: its events went too
            await embedded.history(run_id)
    assert (await embedded.get_run(waiting)).status is RunStatus.SUSPENDED
    assert await embedded.history(waiting) == kept

    again = await cli("runs", "prune", "--older-than", "0s")
    assert again.returncode == 0 and "deleted 0 of 0" in again.stdout


@one_embedded_store
async def test_runs_list_stuck_and_stats_show_the_waiting_run(embedded: Backend, cli: Cli) -> None:
    _, waiting = await finished_and_waiting(embedded)
    info = await embedded.get_run(waiting)

    stuck = await cli("runs", "list", "--stuck", "--older-than", "0s", "--json")
    assert stuck.returncode == 0, stuck.stderr
    assert [json.loads(line)["run_id"] for line in stuck.stdout.splitlines()] == [waiting]
    not_yet = await cli("runs", "list", "--stuck", "--older-than", "1h", "--json")
    assert not_yet.returncode == 0 and not_yet.stdout == ""

    table = await cli("runs", "list")
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[0].split()
    assert header[:5] == ["RUN", "WORKFLOW", "STATUS", "AGE", "WAITING"]
    row = next(line for line in table.stdout.splitlines() if line.startswith(waiting))
    assert row.split()[2:5] == ["suspended", row.split()[3], "approval"]

    before = time.time()
    stats = await cli("stats", "--json")
    after = time.time()
    assert stats.returncode == 0, stats.stderr
    figures = json.loads(stats.stdout)
    assert figures["counts"]["succeeded"] == 1
    assert figures["counts"]["cancelled"] == 1
    assert figures["counts"]["suspended"] == 1
    assert figures["oldest_waiting"]["run_id"] == waiting
    age = figures["oldest_waiting"]["age_seconds"]
    assert before - info.updated_at - 1 <= age <= after - info.updated_at + 1
    assert figures["waiting_by_signal"] == {"approval": 1}


def with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.mark.parametrize("where", ["option", "url"])
async def test_worker_retention_prunes_finished_runs(
    embedded: Backend, procs: Processes, where: str
) -> None:
    """`--retention 0s`, or `retention=0s` in the URL the worker is given."""
    finished, waiting = await finished_and_waiting(embedded)
    retention = ["--retention", "0s"] if where == "option" else []
    url = procs.url if where == "option" else with_option(procs.url, "retention=0s")
    worker = procs.spawn("-m", "perdure", "worker", "console_workflows", "--url", url, *retention)
    try:
        gone: set[str] = set()
        deadline = time.monotonic() + 60
        while gone != set(finished):
            assert worker.popen.poll() is None, worker.output()
            assert time.monotonic() < deadline, "the worker did not prune within 60s"
            for run_id in set(finished) - gone:
                try:
                    await embedded.get_run(run_id)
                except RunNotFoundError:
                    gone.add(run_id)
            await asyncio.sleep(0.1)  # paces the look at the store; the worker works meanwhile
        assert (await embedded.get_run(waiting)).status is RunStatus.SUSPENDED
    finally:
        procs.close()


@one_embedded_store
async def test_bad_retention_in_the_url_is_a_typed_error_naming_it(
    embedded_url: str, cli: Cli
) -> None:
    url = with_option(embedded_url, "retention=soon")
    with pytest.raises(RetentionError, match=r"retention= in .*'soon' is not a duration"):
        url_options.retention(url)
    ran = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["worker", str(HERE / "console_workflows.py"), "--url", url],
        catch_exceptions=False,
    )
    assert ran.exit_code == 6, ran.stderr  # a configuration error
    assert "retention=" in ran.stderr and "'soon' is not a duration" in ran.stderr


def test_retention_is_taken_off_the_url_the_substrate_sees() -> None:
    url = "postgresql://u:pw@h/db?schema=s%20x&retention=30d&sslmode=require"
    assert url_options.backend_url(url) == "postgresql://u:pw@h/db?schema=s%20x&sslmode=require"
    assert url_options.retention(url) == 30 * 86400
    assert url_options.backend_url("sqlite:///x.db?retention=1h") == "sqlite:///x.db"
    assert url_options.backend_url("sqlite:////abs/x.db?retention=1h#f") == "sqlite:////abs/x.db#f"
    assert url_options.retention("sqlite:///x.db") is None
    nested = "temporal://h:7233/ns?state=postgresql%3A%2F%2Fh%2Fdb%3Fa%3D1&retention=2d"
    assert (
        url_options.backend_url(nested)
        == "temporal://h:7233/ns?state=postgresql%3A%2F%2Fh%2Fdb%3Fa%3D1"
    )
    assert open_backend("sqlite:///x.db?retention=1d").url == "sqlite:///x.db"
    with pytest.raises(RetentionError) as bad:
        url_options.retention("postgresql://u:hunter2@h/db?retention=-1d")
    assert "hunter2" not in str(bad.value)


def test_retention_from_pyproject_after_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PERDURE_RETENTION", raising=False)
    monkeypatch.chdir(tmp_path)
    assert retention.configured("sqlite:///x.db") is None
    (tmp_path / "pyproject.toml").write_text('[tool.perdure]\nretention = "2d"\n')
    assert retention.configured("sqlite:///x.db") == 2 * 86400
    assert retention.configured("sqlite:///x.db?retention=1h") == 3600  # the URL wins
    (tmp_path / "pyproject.toml").write_text("[tool.perdure]\nretention = true\n")
    with pytest.raises(RetentionError, match=r"\[tool.perdure\] retention .*True is not"):
        retention.configured("sqlite:///x.db")


@one_embedded_store
async def test_a_backend_that_cannot_delete_runs_loses_no_adapter_state(
    embedded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Undeletable(EmbeddedBackend):
        delete_finished = Backend.delete_finished

    purged: list[Sequence[RunInfo]] = []

    async def spy(backend: Backend, runs: Sequence[RunInfo]) -> None:
        purged.append(runs)

    monkeypatch.setattr(retention, "_purges", lambda: [spy])
    opened = open_backend(embedded_url)
    assert isinstance(opened, EmbeddedBackend)
    backend = Undeletable(opened.store)
    await backend.open()
    try:
        finished, _ = await finished_and_waiting(backend)
        with pytest.raises(NotImplementedError, match="cannot delete runs yet"):
            await retention.prune(backend, older_than=0)
        assert purged == []
        for run_id in finished:
            assert (await backend.get_run(run_id)).status.terminal
    finally:
        await backend.close()
