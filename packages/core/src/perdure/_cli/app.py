"""The ``perdure`` command: typer declarations; the work is in the sibling modules."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from perdure._cli import audit as audit_mod
from perdure._cli import console, ops, replay, runs, token, worker
from perdure._cli import demo as demo_mod
from perdure._cli import gateway as gateway_mod
from perdure._cli.common import execute, guard, parse_duration, parse_rate

EPILOG = (
    "Exit codes: 0 ok; 1 unexpected error; 2 usage or bad input; 3 run not found; "
    "4 backend unavailable; 5 invalid state for the operation; "
    "6 configuration error (incl. a malformed URL). "
    "Errors print one line 'error: ...' on stderr; PERDURE_DEBUG=1 adds the traceback."
)

app = typer.Typer(
    name="perdure",
    help="Operate durable runs: list, inspect, export, approve, resume, cancel, reconcile; "
    "run a worker.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)
runs_app = typer.Typer(
    help="List, show and export runs.",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(runs_app, name="runs")
gateway_app = typer.Typer(
    help="The idempotency gateway in front of services that do not deduplicate: serve it, "
    "list its attempts and which outcomes are unknown, forget one an operator resolved.",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(gateway_app, name="gateway")
token_app = typer.Typer(
    help="Signed operator tokens for the token authorizer (key: $PERDURE_AUTH_KEY, "
    "$PERDURE_AUTH_KEY_FILE or auth_key_file in \\[tool.perdure]).",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(token_app, name="token")

Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Backend URL; default: $PERDURE_URL, else url in \\[tool.perdure] of the nearest "
        "pyproject.toml, else sqlite:///perdure.db.",
        show_default=False,
    ),
]
Modules = Annotated[
    list[str],
    typer.Argument(
        help="Modules (dotted names or .py paths) that define the workflows, agents or graphs.",
        show_default=False,
    ),
]
RunId = Annotated[str, typer.Argument(help="The run id.", show_default=False)]
By = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="Who acts (recorded in the history); default: $PERDURE_ACTOR. Required to "
        "approve, reject, signal or reconcile (the token authorizer takes the token's).",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="A signed operator token (authorizer = token); default: $PERDURE_TOKEN.",
        show_default=False,
    ),
]
Message = Annotated[
    str | None,
    typer.Option("--message", "-m", help="A note recorded with the decision.", show_default=False),
]


# -- runs ---------------------------------------------------------------------------------


@runs_app.command("list")
def runs_list(
    url: Url = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            help="Only runs in this status (repeatable, or "
            "comma-separated): pending, running, suspended, needs-attention, "
            "succeeded, failed, cancelled.",
            show_default=False,
        ),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Only runs not updated for this long: 90s, 30m, 1h, 2d, 1h30m.",
            show_default=False,
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            "-w",
            help="Only runs of this workflow (module:qualname).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="At most this many runs, newest first.")
    ] = 100,
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON Lines of runs instead of a table.")
    ] = False,
    stuck: Annotated[
        bool,
        typer.Option(
            "--stuck",
            help="Only suspended and needs-attention runs waiting longer than --older-than "
            f"(default {runs.STUCK_AFTER}).",
        ),
    ] = False,
) -> None:
    """List runs, newest first: age (how long a waiting run has waited), what each waits
    for, or why it needs attention."""
    execute(lambda: runs.list_runs(url, status, older_than, workflow, limit, as_json, stuck))


@runs_app.command("show")
def runs_show(run_id: RunId, url: Url = None) -> None:
    """Show a run and its history."""
    execute(lambda: runs.show_run(url, run_id))


@runs_app.command("export")
def runs_export(
    run_id: RunId,
    url: Url = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write to this file instead of stdout.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Export a run's history as JSON Lines: {"run": ...} first, then one event per line."""
    execute(lambda: runs.export_run(url, run_id, output))


@runs_app.command("prune")
def runs_prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Delete finished runs not updated for this long: 30d, 12h, 90m.",
            show_default=False,
        ),
    ],
    url: Url = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            "-s",
            help="Only runs in this finished status (repeatable or comma-separated); "
            "default: succeeded, failed, cancelled.",
            show_default=False,
        ),
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="First write each run's history as JSON Lines into this folder.",
            show_default=False,
            file_okay=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")
    ] = False,
) -> None:
    """Delete finished runs older than --older-than, with their history (export first with
    --export)."""
    execute(lambda: runs.prune(url, older_than, status, export, dry_run))


@app.command("stats")
def stats_cmd(
    url: Url = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Counts by status, the run waiting longest, suspended runs by signal (the console's
    summary bar)."""
    execute(lambda: runs.stats(url, as_json))


# -- operations ---------------------------------------------------------------------------


@app.command("signal")
def signal_cmd(
    run_id: RunId,
    name: Annotated[
        str, typer.Argument(help="The signal name the run waits for.", show_default=False)
    ],
    url: Url = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            "-d",
            help="The payload, as JSON (a string needs quotes: '\"yes\"').",
            show_default=False,
        ),
    ] = None,
    by: By = None,
    token: Token = None,
) -> None:
    """Deliver a signal to a run (from any process; the run resumes with its payload)."""
    execute(lambda: ops.send_signal(url, run_id, name, data, by, token))


Request = Annotated[
    str | None,
    typer.Option(
        "--request",
        help="The approval request to answer (`perdure runs show` names it); by default "
        "the one pending, shown before it is answered.",
        show_default=False,
    ),
]


@app.command("approve")
def approve_cmd(
    run_id: RunId,
    url: Url = None,
    by: By = None,
    message: Message = None,
    request: Request = None,
    token: Token = None,
) -> None:
    """Approve the run's pending approval request (a wait for 'approval')."""
    execute(lambda: ops.decide(url, run_id, True, by, message, request, token))


@app.command("reject")
def reject_cmd(
    run_id: RunId,
    url: Url = None,
    by: By = None,
    message: Message = None,
    request: Request = None,
    token: Token = None,
) -> None:
    """Reject the run's pending approval request (a wait for 'approval')."""
    execute(lambda: ops.decide(url, run_id, False, by, message, request, token))


@app.command("resume")
def resume_cmd(run_id: RunId, url: Url = None, by: By = None, token: Token = None) -> None:
    """Make a suspended or parked run due now (after a fix or a deploy)."""
    execute(lambda: ops.resume(url, run_id, by, token))


@app.command("cancel")
def cancel_cmd(run_id: RunId, url: Url = None, by: By = None, token: Token = None) -> None:
    """Cancel a run; completed steps with compensations are compensated."""
    execute(lambda: ops.cancel(url, run_id, by, token))


@app.command("reconcile")
def reconcile_cmd(
    run_id: RunId,
    step: Annotated[
        str,
        typer.Option(
            "--step",
            help="The parked step's key, e.g. 3:charge (see `perdure runs show`).",
            show_default=False,
        ),
    ],
    url: Url = None,
    succeeded: Annotated[bool, typer.Option("--succeeded", help="The effect happened.")] = False,
    failed: Annotated[
        bool, typer.Option("--failed", help="The effect did not happen; the step fails.")
    ] = False,
    retry: Annotated[bool, typer.Option("--retry", help="Call the effect again.")] = False,
    result: Annotated[
        str | None,
        typer.Option(
            "--result", help="With --succeeded: the step's result, as JSON.", show_default=False
        ),
    ] = None,
    message: Message = None,
    by: By = None,
    token: Token = None,
) -> None:
    """Resolve an effect whose outcome is unknown (a run in needs-attention)."""
    execute(
        lambda: ops.reconcile(
            url, run_id, step, ops.reconcile_outcome(succeeded, failed, retry, result),
            result, message, by, token,
        )
    )  # fmt: skip


# -- worker and demo ----------------------------------------------------------------------


@token_app.command("issue")
def token_issue_cmd(
    by: Annotated[
        str,
        typer.Option("--by", help="The identity the token carries (recorded in history)."),
    ],
    ttl: Annotated[str, typer.Option("--ttl", help="How long it is valid: 15m, 8h, 7d.")] = "1h",
    verb: Annotated[
        list[str] | None,
        typer.Option(
            "--verb",
            help="Only these verbs (approve, reject, signal, cancel, resume, reconcile; "
            "repeatable or comma-separated). Default: any.",
            show_default=False,
        ),
    ] = None,
    workflow: Annotated[
        list[str] | None,
        typer.Option(
            "--workflow", help="Only runs of workflows matching these patterns.", show_default=False
        ),
    ] = None,
    tool: Annotated[
        list[str] | None,
        typer.Option(
            "--tool", help="Only approvals of tools matching these patterns.", show_default=False
        ),
    ] = None,
    run: Annotated[
        list[str] | None,
        typer.Option("--run", help="Only run ids matching these patterns.", show_default=False),
    ] = None,
) -> None:
    """Print a signed token for --by (give it to a person, a bot or a console login)."""
    guard(lambda: token.issue(by, ttl, verb, workflow, tool, run))


@app.command("worker")
def worker_cmd(
    modules: Modules,
    url: Url = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Runs driven at once.")
    ] = 100,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            help="The substrate's queue to take runs from (Temporal: the task queue, "
            "as task_queue= in the URL).",
            show_default=False,
        ),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate",
            help="At most this much work started per second from the queue by all its "
            "workers together (5/s, 300/m), e.g. to keep under an LLM's rate limit. "
            "Temporal: drives started on the task queue (a drive runs a run up to its "
            "next wait).",
            show_default=False,
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            help="Expose Prometheus metrics on http://127.0.0.1:PORT/metrics "
            "(needs perdure[metrics]).",
            show_default=False,
        ),
    ] = None,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            min=0,
            help="Seconds SIGTERM/SIGINT lets in-flight steps finish and record before "
            "the worker exits.",
        ),
    ] = 30.0,
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            envvar="PERDURE_RETENTION",
            help="Delete finished runs not updated for this long (30d, 12h), checked "
            "hourly, as `perdure runs prune` does; default: retention= in the URL "
            "(sqlite:///runs.db?retention=30d), else keep them.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Import MODULEs, then recover and drive their runs until SIGINT/SIGTERM (which
    drains: in-flight steps finish, their runs are released for another worker)."""
    execute(
        lambda: worker.serve(
            url,
            modules,
            concurrency,
            metrics_port,
            grace,
            retention,
            queue=queue,
            rate=None if rate is None else parse_rate("--rate", rate),
        ),
        before=lambda: worker.prepare(modules),
    )


@app.command("replay")
def replay_cmd(
    modules: Modules,
    url: Url = None,
    run: Annotated[
        str | None,
        typer.Option("--run", help="Check this run only.", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Runs checked at most.")] = 1000,
) -> None:
    """Replay in-flight runs against MODULEs' code, in memory: exit 5 if a history no
    longer matches (check before a deploy)."""
    execute(lambda: replay.replay(url, run, limit), before=lambda: worker.import_targets(modules))


@app.command("audit")
def audit_cmd(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="MODULE or MODULE:ATTR (dotted names or .py paths) defining the agents or graphs.",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        audit_mod.Format,
        typer.Option("--format", help="A table for people, JSON for CI."),
    ] = audit_mod.Format.TABLE,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 5 if any tool or node is undeclared.")
    ] = False,
) -> None:
    """List every tool, node and MCP server the agents and graphs can run, with its
    perdure policy (\\[tool.perdure.tools] in pyproject.toml declares tools you do not own;
    the MCP servers \\[tool.perdure.mcp] names are connected and their tools listed live)."""
    guard(lambda: audit_mod.run_audit(targets or [], fmt, strict))


@app.command("console")
def console_cmd(
    url: Url = None,
    host: Annotated[
        str,
        typer.Option("--host", help="Interface to listen on (keep it on loopback behind a proxy)."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535, help="Port.")] = 8765,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--secret-file",
            help="File holding the operators' shared login secret; default: "
            "$PERDURE_CONSOLE_SECRET, else one made up and printed at start.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    metrics_token_file: Annotated[
        Path | None,
        typer.Option(
            "--metrics-token-file",
            help="File holding the bearer token Prometheus scrapes /metrics with; default: "
            "$PERDURE_METRICS_TOKEN, else /metrics is for logged-in operators only.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Serve the web console: runs, stuck ages, approvals, reconcile, timelines, /metrics."""
    guard(lambda: console.serve(url, host, port, secret_file, metrics_token_file))


@app.command("demo")
def demo_cmd(
    url: Url = None,
    framework: Annotated[
        demo_mod.Framework,
        typer.Option("--framework", "-f", help="Which adapter's demo agent to run."),
    ] = demo_mod.Framework.OPENAI_AGENTS,
) -> None:
    """Run the demo: an agent that survives a crash and waits for your approval."""
    guard(lambda: demo_mod.run_demo(url, framework))


# -- gateway ------------------------------------------------------------------------------

Listen = Annotated[
    str, typer.Option("--listen", help="HOST:PORT to listen on (:0 picks a free port).")
]
Retention = Annotated[
    str, typer.Option("--retention", help="How long answered keys are kept, e.g. 24h, 7d.")
]
UpstreamTimeout = Annotated[
    str,
    typer.Option(
        "--timeout", help="How long the upstream may take; past it the outcome is unknown."
    ),
]
RequireKey = Annotated[
    bool,
    typer.Option("--require-key", help="Refuse side-effecting calls without an idempotency key."),
]


@gateway_app.command("serve")
def gateway_serve_cmd(
    upstream: Annotated[
        list[str],
        typer.Option(
            "--upstream",
            help="NAME=URL (repeatable): /NAME/rest goes to URL/rest.",
            show_default=False,
        ),
    ],
    url: Url = None,
    listen: Listen = "127.0.0.1:8780",
    retention: Retention = "24h",
    timeout: UpstreamTimeout = "60s",
    max_body: Annotated[
        int,
        typer.Option("--max-body", min=0, help="Largest response body (bytes) kept for replay."),
    ] = 8 * 1024 * 1024,
    require_key: RequireKey = False,
) -> None:
    """Serve the HTTP gateway: requests with an Idempotency-Key reach their upstream once
    (one without it is refused with 428 under --require-key)."""
    guard(
        lambda: gateway_mod.serve(
            url,
            listen,
            upstream,
            parse_duration("--retention", retention),
            parse_duration("--timeout", timeout),
            max_body,
            require_key,
        )
    )


@gateway_app.command("mcp")
def gateway_mcp_cmd(
    name: Annotated[
        str,
        typer.Option("--name", help="The upstream server's name (its ledger scope is mcp:NAME)."),
    ],
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="After --: the command that starts the upstream server over stdio.",
            show_default=False,
        ),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option("--upstream", help="The upstream's streamable-HTTP URL.", show_default=False),
    ] = None,
    read_only: Annotated[
        list[str] | None,
        typer.Option(
            "--read-only",
            help="A tool to pass through although the upstream does not annotate it "
            "readOnlyHint (repeatable).",
            show_default=False,
        ),
    ] = None,
    url: Url = None,
    listen: Listen = "127.0.0.1:8781",
    retention: Retention = "24h",
    timeout: UpstreamTimeout = "60s",
    require_key: RequireKey = False,
) -> None:
    """Serve the MCP proxy: tools/call of side-effecting tools with an idempotency key in
    _meta reach the upstream MCP server once."""
    guard(
        lambda: gateway_mod.serve_mcp(
            url,
            listen,
            name,
            upstream,
            command or [],
            read_only or [],
            parse_duration("--retention", retention),
            parse_duration("--timeout", timeout),
            require_key,
        )
    )


@gateway_app.command("status")
def gateway_status_cmd(
    url: Url = None,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help="Only these states (repeatable): in-flight, done, unknown."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    fmt: Annotated[
        gateway_mod.Format, typer.Option("--format", help="A table for people, JSON for scripts.")
    ] = gateway_mod.Format.TABLE,
) -> None:
    """List the gateway's attempts, newest first, with those whose outcome is unknown."""
    execute(lambda: gateway_mod.status(url, state or [], limit, fmt))


@gateway_app.command("forget")
def gateway_forget_cmd(
    upstream: Annotated[str, typer.Argument(help="The upstream name (or mcp:NAME).")],
    key: Annotated[str, typer.Argument(help="The idempotency key.")],
    url: Url = None,
) -> None:
    """Forget one attempt once you checked its upstream: its key's next call is forwarded."""
    execute(lambda: gateway_mod.forget(url, upstream, key))


def _add_backend_commands() -> None:
    """Command groups that installed backends bring (entry-point group ``perdure.cli``,
    a typer app named by its entry point: ``perdure temporal setup``). A backend that
    cannot be imported brings none; its URL says why when it is used."""
    for ep in importlib.metadata.entry_points(group="perdure.cli"):
        try:
            group = ep.load()
        except ImportError:
            continue
        app.add_typer(group, name=ep.name)


_add_backend_commands()


def main() -> None:
    """Entry point of the ``perdure`` script.

    The process ends with ``os._exit`` once the command is done and its output flushed:
    a backend's native client (Temporal's) leaves threads that can abort the
    interpreter's own teardown ("PyGILState_Release ... finalizing", temporalio
    sdk-python issue 300), which would turn a clean exit code into SIGABRT."""
    try:
        app(prog_name="perdure")
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
