"""Plumbing shared by every command: exit codes, error reporting, opening the backend,
and parsing of command-line values (JSON, durations, statuses)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import traceback
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from typing import Any

import click
import typer
from rich.console import Console

from perdure import _durations as durations
from perdure._authorization import AuthenticationError, AuthorizationError
from perdure._backend import Backend
from perdure._config import resolve_url
from perdure._errors import (
    BackendUnavailableError,
    ConfigurationError,
    InvalidInputError,
    InvalidRunStateError,
    PerdureError,
    RunNotFoundError,
)
from perdure._masking import mask_text
from perdure._masking import mask_url as mask_url
from perdure._records import RunStatus
from perdure._registry import open_backend

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_INVALID_STATE = 5
EXIT_CONFIG = 6
EXIT_DENIED = 7
EXIT_INTERRUPTED = 130

#: Most specific first: an error that is two of these gets the first code.
_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (RunNotFoundError, EXIT_NOT_FOUND),
    (BackendUnavailableError, EXIT_UNAVAILABLE),
    (InvalidRunStateError, EXIT_INVALID_STATE),
    (ConfigurationError, EXIT_CONFIG),
    (InvalidInputError, EXIT_USAGE),
    (AuthenticationError, EXIT_DENIED),
    (AuthorizationError, EXIT_DENIED),
)


class CliError(Exception):
    """A failure the CLI reports as ``error: <message>`` and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class UsageProblem(CliError):
    """Bad input on the command line (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, CliError):
        return exc.code
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_ERROR


def debug_enabled() -> bool:
    return os.environ.get("PERDURE_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


#: Width of tables written to a pipe or file (no terminal, no COLUMNS): wide enough that
#: a row stays one line for grep.
PIPE_WIDTH = 200


def out() -> Console:
    """A console on the current stdout (made per call, so redirections and COLUMNS apply)."""
    console = Console(highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console = Console(highlight=False, width=PIPE_WIDTH)
    return console


def err() -> Console:
    return Console(stderr=True, highlight=False)


def report(exc: BaseException) -> int:
    """Print ``error: <message>`` on stderr (and the traceback under PERDURE_DEBUG=1)."""
    code = exit_code_for(exc)
    if debug_enabled():
        sys.stderr.write(mask_text("".join(traceback.format_exception(exc))))
    message = mask_text(str(exc).strip()) or type(exc).__name__
    if code == EXIT_ERROR and not isinstance(exc, PerdureError | CliError):
        message = f"{type(exc).__name__}: {message}"
    message = " ".join(message.split())
    err().print(f"error: {message}", markup=False, soft_wrap=True)
    return code


def guard(action: Callable[[], int | None]) -> None:
    """Run a command body; map what it raises to one error line and an exit code."""
    try:
        code = action()
    except (
        typer.Exit,
        typer.Abort,
        click.exceptions.Exit,
        click.ClickException,
        click.exceptions.Abort,
    ):
        raise
    except KeyboardInterrupt:
        err().print("interrupted", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        raise typer.Exit(report(exc)) from None
    if code:
        raise typer.Exit(code)


def execute(
    body: Callable[[], Coroutine[Any, Any, int | None]],
    before: Callable[[], object] | None = None,
) -> None:
    """``guard`` around ``asyncio.run(body())``: one event loop per command. ``before``
    runs first, outside the loop (importing the user's modules), under the same guard."""

    def run() -> int | None:
        if before is not None:
            before()
        return asyncio.run(body())

    guard(run)


def load_backend(url: str | None) -> Backend:
    """The unopened backend for ``url`` (resolved: argument, env, pyproject, default)."""
    resolved = resolve_url(url)
    try:
        return open_backend(resolved)
    except ImportError as exc:
        raise ConfigurationError(
            f"the backend for {mask_url(resolved)} cannot be loaded ({exc}); "
            "is its extra installed, e.g. perdure[postgres]?"
        ) from exc


@contextlib.asynccontextmanager
async def connected(url: str | None) -> AsyncGenerator[Backend, None]:
    """The opened backend for ``url``, closed on the way out."""
    backend = load_backend(url)
    try:
        await backend.open()
    except BaseException:
        with contextlib.suppress(Exception):
            await backend.close()
        raise
    try:
        yield backend
    finally:
        await backend.close()


def parse_json(option: str, text: str | None) -> Any:
    """The value of a JSON option, or ``UsageProblem`` saying what is wrong and where."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        hint = ""
        if text.strip() and text.strip()[0] not in '{["-0123456789tfn':
            hint = f"; to send a string, quote it: {option} '{json.dumps(text)}'"
        raise UsageProblem(
            f"{option} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
            f"in {text!r}{hint}"
        ) from None


def parse_duration(option: str, text: str) -> float:
    """Seconds in ``90s``, ``30m``, ``1h``, ``2d``, ``1w``, ``1h30m`` or a bare number."""
    try:
        return durations.parse_duration(text)
    except ValueError as exc:
        raise UsageProblem(f"{option} {exc}") from None


#: Seconds per unit of a ``--rate`` (``5/s``, ``300/m``, ``10000/h``).
_RATE_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_rate(option: str, text: str) -> float:
    """Per second in ``5/s``, ``300/m``, ``10000/h`` or a bare number (per second)."""
    count, _, unit = text.strip().partition("/")
    seconds = _RATE_UNITS.get(unit.strip().lower() or "s")
    try:
        rate = float(count)
    except ValueError:
        rate = -1.0
    if seconds is None or not rate > 0 or rate == float("inf"):
        raise UsageProblem(f"{option} {text!r}: give a positive rate such as 5/s, 300/m or 10000/h")
    return rate / seconds


def parse_statuses(values: Sequence[str] | None) -> list[RunStatus] | None:
    """``--status`` values (repeatable, comma-separated, ``_`` or ``-``) as statuses."""
    if not values:
        return None
    known = {s.value: s for s in RunStatus}
    out_: list[RunStatus] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower().replace("_", "-")
            if not name:
                continue
            status = known.get(name)
            if status is None:
                raise UsageProblem(
                    f"--status {part.strip()!r} is not a run status; use one of " + ", ".join(known)
                )
            if status not in out_:
                out_.append(status)
    return out_ or None
