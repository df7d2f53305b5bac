"""The ``perdure`` CLI against a real SQLite store: output, history and exit codes."""

from __future__ import annotations

import asyncio
import json
import sys
import types
from pathlib import Path
from typing import Any

import cli_workflows
import pytest
from typer.testing import CliRunner

from perdure._cli import app
from perdure._cli.render import run_summary, runs_table
from perdure._records import Event, EventKind, RunInfo, RunStatus
from perdure._registry import open_backend
from perdure._semantics import approvals
from perdure._workflow import Workflow

ENV = {"COLUMNS": "250", "PERDURE_DEBUG": "", "NO_COLOR": "1"}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/p.db"


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={**ENV, **(env or {})})


async def _settle(run_id: str) -> None:
    """Wait for this process's drive of ``run_id`` to reach its next stop."""
    drives = [t for t in asyncio.all_tasks() if t.get_name() == f"perdure-run-{run_id}"]
    await asyncio.gather(*drives)


def start(url: str, workflow: Workflow[..., Any], *args: Any, run_id: str) -> RunInfo:
    """Start a run in-process and let it go as far as it can (suspended or parked)."""

    async def go() -> RunInfo:
        backend = open_backend(url)
        await backend.open()
        try:
            await backend.start(workflow, args, {}, run_id=run_id)
            await _settle(run_id)
            return await backend.get_run(run_id)
        finally:
            await backend.close()

    return asyncio.run(go())


def drive(url: str, run_id: str) -> RunInfo:
    """Drive a due run in-process (as its worker would) until it stops."""

    async def go() -> RunInfo:
        backend = open_backend(url)
        await backend.open()
        try:
            return await backend.wait(run_id, timeout=30)
        finally:
            await backend.close()

    return asyncio.run(go())


def export(url: str, run_id: str) -> list[dict[str, Any]]:
    result = cli("runs", "export", run_id, "--url", url)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


# -- runs list / show / export ------------------------------------------------------------


def test_runs_list_shows_what_a_suspended_run_waits_for(url: str) -> None:
    info = start(url, cli_workflows.greet, "ann", run_id="greet-1")
    assert info.status is RunStatus.SUSPENDED

    result = cli("runs", "list", "--url", url)
    assert result.exit_code == 0, result.output
    assert "greet-1" in result.stdout
    assert "cli_workflows:greet" in result.stdout
    assert "suspended" in result.stdout
    assert "waits for approval" in result.stdout

    result = cli("runs", "list", "--url", url, "--status", "suspended", "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["run_id"], r["status"], r["waiting_for"]) for r in rows] == [
        ("greet-1", "suspended", "approval")
    ]

    for filters in (
        ["--status", "succeeded,failed"],
        ["--older-than", "1h"],
        ["--workflow", "other:wf"],
    ):
        result = cli("runs", "list", "--url", url, *filters)
        assert result.exit_code == 0, result.output
        assert "no runs match" in result.stdout
    result = cli(
        "runs",
        "list",
        "--url",
        url,
        "--status",
        "needs_attention,suspended",
        "--older-than",
        "0s",
        "--limit",
        "1",
    )
    assert result.exit_code == 0 and "greet-1" in result.stdout


def test_runs_list_rejects_bad_filters(url: str) -> None:
    result = cli("runs", "list", "--url", url, "--status", "sleeping")
    assert result.exit_code == 2
    assert "error: --status 'sleeping' is not a run status" in result.stderr
    result = cli("runs", "list", "--url", url, "--older-than", "soon")
    assert result.exit_code == 2
    assert "not a duration" in result.stderr


def test_url_comes_from_the_environment(url: str) -> None:
    start(url, cli_workflows.greet, "env", run_id="greet-env")
    result = cli("runs", "list", "--json", env={"PERDURE_URL": url})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_id"] == "greet-env"


def test_approve_records_who_decided_in_show_and_export(url: str, tmp_path: Path) -> None:
    start(url, cli_workflows.greet, "bob", run_id="greet-2")
    result = cli("approve", "greet-2", "--url", url, "--by", "alice", "--message", "fine")
    assert result.exit_code == 0, result.output
    request = approvals.request_id("greet-2", "2:signal:approval")
    assert f"approved request {request} of run greet-2 as alice" in result.stdout

    info = drive(url, "greet-2")
    assert info.status is RunStatus.SUCCEEDED
    assert info.result == {"text": "hello bob", "decision": {"approved": True, "message": "fine"}}

    result = cli("runs", "show", "greet-2", "--url", url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in (
        "greet-2",
        "succeeded",
        "1:compose",
        "step_completed",
        "signal_received",
        "sent by alice",
        "run_succeeded",
        '"approved":true',
    ):
        assert text in out, text

    lines = export(url, "greet-2")
    assert lines[0]["run"]["run_id"] == "greet-2"
    assert lines[0]["run"]["status"] == "succeeded"
    events = lines[1:]
    assert [e["seq"] for e in events] == list(range(len(events)))
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_succeeded"
    (signal,) = [e for e in events if e["kind"] == "signal_received"]
    assert signal["data"]["sent_by"] == "alice"
    assert signal["data"]["payload"] == {"approved": True, "message": "fine"}

    target = tmp_path / "out" / "greet-2.jsonl"
    target.parent.mkdir()
    result = cli("runs", "export", "greet-2", "--url", url, "--output", str(target))
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in target.read_text().splitlines()] == lines


def test_reject_needs_an_identity_and_takes_perdure_actor(url: str) -> None:
    start(url, cli_workflows.greet, "cy", run_id="greet-3")
    result = cli("reject", "greet-3", "--url", url, env={"PERDURE_ACTOR": ""})
    assert result.exit_code == 7, result.output  # never the OS user, never nobody
    assert "an identity is required to reject" in result.stderr
    result = cli("reject", "greet-3", "--url", url, env={"PERDURE_ACTOR": "cy-ops"})
    assert result.exit_code == 0, result.output
    assert drive(url, "greet-3").status is RunStatus.SUCCEEDED
    (signal,) = [e for e in export(url, "greet-3") if e.get("kind") == "signal_received"]
    assert signal["data"]["sent_by"] == "cy-ops"
    assert signal["data"]["payload"] == {"approved": False, "message": None}


def test_signal_sends_a_json_payload(url: str) -> None:
    start(url, cli_workflows.greet, "dee", run_id="greet-4")
    result = cli(
        "signal",
        "greet-4",
        "approval",
        "--url",
        url,
        "--data",
        '{"approved": true, "note": [1, 2]}',
        "--by",
        "ops",
    )
    assert result.exit_code == 0, result.output
    assert "sent signal 'approval' to run greet-4 as ops" in result.stdout
    info = drive(url, "greet-4")
    assert info.result["decision"] == {"approved": True, "note": [1, 2]}


def test_signal_with_invalid_json_exits_2_and_sends_nothing(url: str) -> None:
    start(url, cli_workflows.greet, "eve", run_id="greet-5")
    result = cli("signal", "greet-5", "approval", "--url", url, "--data", "{approved: yes}")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --data is not valid JSON")
    assert "Traceback" not in result.output
    result = cli("signal", "greet-5", "approval", "--url", url, "--data", "yes")
    assert result.exit_code == 2
    assert "quote it" in result.stderr
    assert not [e for e in export(url, "greet-5") if e.get("kind") == "signal_received"]
    assert cli("runs", "list", "--url", url, "--json").stdout.count('"suspended"') == 1


def test_resume_and_cancel(url: str) -> None:
    start(url, cli_workflows.greet, "fay", run_id="greet-6")
    result = cli("resume", "greet-6", "--url", url)
    assert result.exit_code == 0, result.output
    assert "resumed" in result.stdout
    result = cli("cancel", "greet-6", "--url", url)
    assert result.exit_code == 0, result.output
    assert "cancel requested for run greet-6" in result.stdout
    assert drive(url, "greet-6").status is RunStatus.CANCELLED
    # A finished run can be neither cancelled nor resumed again.
    for command in ("cancel", "resume"):
        result = cli(command, "greet-6", "--url", url)
        assert result.exit_code == 5, (command, result.output)
        assert result.stderr.startswith("error: ")


# -- reconcile ----------------------------------------------------------------------------


def test_reconcile_a_parked_effect(url: str) -> None:
    info = start(url, cli_workflows.pay, 500, run_id="pay-1")
    assert info.status is RunStatus.NEEDS_ATTENTION
    result = cli("runs", "list", "--url", url, "--status", "needs-attention")
    assert result.exit_code == 0, result.output
    assert "unknown outcome at step 1:charge" in result.stdout

    result = cli("reconcile", "pay-1", "--url", url, "--step", "1:charge")
    assert result.exit_code == 2
    assert "choose exactly one of --succeeded, --failed, --retry" in result.stderr
    result = cli(
        "reconcile", "pay-1", "--url", url, "--step", "1:charge", "--retry", "--result", "1"
    )
    assert result.exit_code == 2
    result = cli(
        "reconcile", "pay-1", "--url", url, "--step", "1:charge", "--succeeded", "--result", "ch_1"
    )
    assert result.exit_code == 2
    assert "--result is not valid JSON" in result.stderr
    result = cli("reconcile", "pay-1", "--url", url, "--step", "9:other", "--retry", "--by", "x")
    assert result.exit_code == 5

    result = cli(
        "reconcile",
        "pay-1",
        "--url",
        url,
        "--step",
        "1:charge",
        "--succeeded",
        "--result",
        '"ch_1"',
        "--by",
        "finance",
    )
    assert result.exit_code == 0, result.output
    assert "reconciled step 1:charge of run pay-1 as succeeded (by finance)" in result.stdout
    info = drive(url, "pay-1")
    assert info.status is RunStatus.SUCCEEDED and info.result == "ch_1"
    (rec,) = [e for e in export(url, "pay-1") if e.get("kind") == "reconciled"]
    assert rec["data"]["by"] == "finance" and rec["data"]["result"] == "ch_1"


def test_reconcile_a_run_that_is_not_parked_exits_5(url: str) -> None:
    start(url, cli_workflows.greet, "gus", run_id="greet-7")
    result = cli(
        "reconcile", "greet-7", "--url", url, "--step", "1:compose", "--retry", "--by", "ops"
    )
    assert result.exit_code == 5
    assert result.stderr.startswith("error: run 'greet-7' has no unknown outcome")


# -- errors and exit codes ----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "show", "nope"],
        ["runs", "export", "nope"],
        ["approve", "nope"],
        ["reject", "nope"],
        ["signal", "nope", "go"],
        ["resume", "nope"],
        ["cancel", "nope"],
        ["reconcile", "nope", "--step", "0:x", "--failed"],
    ],
)
def test_unknown_run_exits_3(url: str, command: list[str]) -> None:
    result = cli(*command, "--url", url)
    assert result.exit_code == 3, result.output
    assert result.stderr == "error: no run with id 'nope'\n"


def test_malformed_url_exits_6() -> None:
    result = cli("runs", "list", "--url", "nonsense")
    assert result.exit_code == 6
    assert result.stderr.startswith("error: malformed backend URL 'nonsense'")
    result = cli("runs", "list", "--url", "nosuch://x")
    assert result.exit_code == 6
    assert "no backend for 'nosuch'" in result.stderr


def test_unreachable_postgres_exits_4() -> None:
    result = cli("runs", "list", "--url", "postgresql://postgres@127.0.0.1:1/x")
    assert result.exit_code == 4, result.output
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_debug_shows_the_traceback() -> None:
    result = cli("runs", "list", "--url", "nonsense", env={"PERDURE_DEBUG": "1"})
    assert result.exit_code == 6
    assert "Traceback" in result.stderr
    assert "ConfigurationError" in result.stderr


def test_typer_usage_errors_exit_2(url: str) -> None:
    assert cli("runs", "show").exit_code == 2
    assert cli("runs", "list", "--url", url, "--limit", "0").exit_code == 2
    assert cli("frobnicate").exit_code == 2


def test_help_documents_the_exit_codes() -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for text in (
        "3 run not found",
        "4 backend unavailable",
        "5 invalid state",
        "6 configuration error",
    ):
        assert text in result.stdout


def test_worker_with_an_unimportable_module_exits_2(url: str, tmp_path: Path) -> None:
    result = cli("worker", "nonexistent_module", "--url", url)
    assert result.exit_code == 2
    assert "nonexistent_module" in result.stderr
    assert result.stderr.startswith("error: cannot import module 'nonexistent_module'")
    result = cli("worker", str(tmp_path / "missing.py"), "--url", url)
    assert result.exit_code == 2
    assert "no such file" in result.stderr


def test_worker_rate_and_queue_on_a_backend_without_queues_are_refused(url: str) -> None:
    result = cli("worker", "tests/cli/cli_workflows.py", "--url", url, "--rate", "5/s")
    assert result.exit_code == 6
    assert "--rate: sqlite:///" in result.stderr
    assert "has no queues or rate limits" in result.stderr
    result = cli("worker", "tests/cli/cli_workflows.py", "--url", url, "--queue", "llm")
    assert result.exit_code == 6
    assert "--queue: sqlite:///" in result.stderr
    for bad in ("fast", "0/s", "5/week", "-1"):
        result = cli("worker", "tests/cli/cli_workflows.py", "--url", url, "--rate", bad)
        assert result.exit_code == 2, bad
        assert f"--rate {bad!r}: give a positive rate such as 5/s" in result.stderr


def test_demo_without_the_adapter_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "perdure_openai_agents.demo", None)
    result = cli("demo")
    assert result.exit_code == 1
    assert "error: the demo needs perdure[openai-agents]" in result.stderr


def test_demo_runs_the_adapters_main(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []

    def main(url: str | None) -> int:
        calls.append(url)
        return 0

    fake = types.ModuleType("perdure_langgraph.demo")
    fake.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "perdure_langgraph.demo", fake)
    result = cli("demo", "--framework", "langgraph", "--url", "sqlite:///demo.db")
    assert result.exit_code == 0, result.output
    assert calls == ["sqlite:///demo.db"]


# -- rendering ----------------------------------------------------------------------------


def test_pending_approval_details_are_shown() -> None:
    """An adapter's suspension may say what is pending (a tool call awaiting approval)."""
    from rich.console import Console

    from perdure._cli.render import history_table, pending_details

    info = RunInfo(
        "r1",
        "mod:agent",
        RunStatus.SUSPENDED,
        None,
        0.0,
        0.0,
        waiting_for="approval",
        code_version="v2",
    )
    ev = Event(
        "r1",
        4,
        EventKind.SUSPENDED,
        0.0,
        "4:signal:approval",
        "approval",
        {
            "waiting_for": "approval",
            "wake_at": None,
            "deadline": None,
            "tool": "refund",
            "arguments": {"order": 42},
            "requested_at": 0.0,
        },
    )
    pending = pending_details(ev)
    assert pending == {"tool": "refund", "arguments": {"order": 42}, "requested_at": 0.0}
    summary = run_summary(info, pending)
    assert summary.startswith(
        'waits for approval (tool=refund, arguments={"order":42}, requested_at='
    )
    console = Console(width=250, record=True)
    console.print(runs_table([info], {"r1": pending}))
    console.print(history_table([ev]))
    text = console.export_text()
    assert "tool=refund" in text and "v2" in text and "4:signal:approval" in text
