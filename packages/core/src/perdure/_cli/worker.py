"""``perdure worker MODULE...``: import the workflows, then recover and drive runs."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.logging import RichHandler
from rich.markup import escape

from perdure import _locate as locate
from perdure import _metrics as metrics
from perdure import _retention as retention
from perdure._backend import Backend
from perdure._cli.common import UsageProblem, err, load_backend, mask_url, parse_duration
from perdure._config import resolve_url
from perdure._engine.outages import Backoff, OutageLog
from perdure._errors import ConfigurationError, classify
from perdure._workflow import registered_workflows

log = logging.getLogger("perdure.worker")


def _module_name_for(path: Path) -> str:
    """The dotted name of the module in ``path``: its enclosing packages (folders with an
    ``__init__.py``) plus its stem, with the folder above the top package on ``sys.path``
    (as pytest does), so workflow names match those of the process that started the run."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    root = str(folder)
    if root not in sys.path:
        sys.path.insert(0, root)
    return ".".join(parts)


def import_targets(targets: Sequence[str]) -> list[str]:
    """Import each module (dotted name or path to a ``.py`` file); their names."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    names: list[str] = []
    for target in targets:
        path = Path(target)
        is_path = target.endswith(".py") or os.sep in target or "/" in target
        if is_path:
            if not path.is_file():
                raise UsageProblem(f"cannot import {target!r}: no such file")
            name = _module_name_for(path)
        else:
            name = target
        try:
            module = importlib.import_module(name)
            locate.allow_module(name)  # stored locators may name what the operator chose
        except Exception as exc:
            raise UsageProblem(
                f"cannot import module {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        loaded = getattr(module, "__file__", None)
        if is_path and loaded is not None and Path(loaded).resolve() != path.resolve():
            raise UsageProblem(
                f"cannot import {target!r}: the name {name!r} is taken by {loaded}; "
                "rename the file or pass its dotted module name"
            )
        names.append(name)
    return names


def setup_logging() -> None:
    """perdure's logger at INFO on stderr, through rich."""
    logger = logging.getLogger("perdure")
    logger.setLevel(logging.INFO)
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=err(), show_path=False, rich_tracebacks=True, markup=False)
        logger.addHandler(handler)
    logger.propagate = False


#: How often a worker with --metrics-port re-reads the backend's runs for the state gauges.
STATE_REFRESH_SECONDS = 15.0


async def _refresh_state(backend: Backend, stop: asyncio.Event) -> None:
    """Keep the runs-by-status gauges current: one list query per interval."""
    while not stop.is_set():
        try:
            await metrics.refresh(backend)
        except Exception:
            log.warning("metrics: reading the runs failed; retrying", exc_info=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), STATE_REFRESH_SECONDS)


def _serve_metrics(port: int) -> None:
    try:
        metrics.serve_http(port)
    except ImportError as exc:
        raise ConfigurationError(f"--metrics-port: {exc}") from exc
    except OSError as exc:
        raise UsageProblem(f"--metrics-port {port}: {exc.strerror or exc}") from exc
    log.info("metrics on http://127.0.0.1:%d/metrics", port)


async def open_when_reachable(backend: Backend, stop: asyncio.Event) -> bool:
    """Open ``backend``, waiting out a substrate that is not up yet (capped, jittered
    backoff, logged once); False if ``stop`` came first. Misconfiguration raises."""
    backoff = Backoff()
    outage = OutageLog(log, f"the backend at {mask_url(backend.url)}")
    while not stop.is_set():
        try:
            await backend.open()
        except Exception as exc:
            if classify(exc) != "transient":
                raise
            outage.down(exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff.delay())
            continue
        outage.up()
        return True
    return False


#: How often a worker with --retention prunes.
RETENTION_EVERY_SECONDS = 3600.0


async def _retain(backend: Backend, keep: float, stop: asyncio.Event) -> None:
    """Prune finished runs older than ``keep`` now and then every hour until ``stop``."""
    while not stop.is_set():
        try:
            report = await retention.prune(backend, older_than=keep)
            if report.deleted:
                log.info("retention: deleted %d finished run(s)", report.deleted)
        except Exception:
            log.warning("retention: pruning failed; trying again later", exc_info=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RETENTION_EVERY_SECONDS)


def prepare(modules: Sequence[str]) -> None:
    """Before the worker's event loop: import the workflows' modules, set up logging."""
    import_targets(modules)
    setup_logging()


def retention_of(url: str | None, option: str | None) -> float | None:
    """How long finished runs are kept: ``--retention`` (or ``$PERDURE_RETENTION``), else
    ``retention=`` in the backend URL, else ``[tool.perdure] retention``, else forever."""
    if option:
        return parse_duration("--retention", option)
    return retention.configured(resolve_url(url))


async def serve(
    url: str | None,
    modules: Sequence[str],
    concurrency: int,
    metrics_port: int | None = None,
    grace: float = 30.0,
    retention_option: str | None = None,
    *,
    queue: str | None = None,
    rate: float | None = None,
) -> None:
    keep = retention_of(url, retention_option)
    names = registered_workflows()
    if not names:
        raise ConfigurationError(
            f"no workflows registered after importing {', '.join(modules)}; "
            "a worker needs the module(s) that define @perdure.workflow functions, "
            "agents or graphs"
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        log.info("received %s; stopping (send it again to force)", sig.name)
        stop.set()
        for s in installed:  # a second signal gets the default behaviour
            loop.remove_signal_handler(s)
        installed.clear()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not main thread
            pass
    backend = load_backend(url)
    try:
        if await open_when_reachable(backend, stop):
            owner = getattr(backend, "owner", None)
            err().print(
                f"[bold green]perdure worker[/] on [bold]{escape(mask_url(backend.url))}[/]"
                + (f" as [cyan]{escape(str(owner))}[/]" if owner else "")
                + f", concurrency {concurrency}"
                + (f", queue [cyan]{escape(queue)}[/]" if queue else "")
                + (f", at most {rate:g}/s" if rate else "")
                + f"; workflows: {escape(', '.join(names))}",
                soft_wrap=True,
            )
            chores: list[asyncio.Task[None]] = []
            if metrics_port is not None:
                _serve_metrics(metrics_port)
                chores.append(asyncio.create_task(_refresh_state(backend, stop)))
            if keep is not None:
                chores.append(asyncio.create_task(_retain(backend, keep, stop)))
            try:
                # Only what was given: a backend's serve may predate the two options.
                limits: dict[str, Any] = {"queue": queue} if queue is not None else {}
                if rate is not None:
                    limits["rate"] = rate
                await backend.serve(stop=stop, concurrency=concurrency, **limits)
                # Nothing runs between this line and shutdown setting ``draining`` (its
                # first act, before any await): a reader knows no new step starts now.
                log.info(
                    "draining: in-flight steps finish and record (up to %gs), then their "
                    "runs are released for another worker",
                    grace,
                )
                await backend.shutdown(grace=grace)
            finally:
                stop.set()
                for chore in chores:
                    await chore
        log.info("worker stopped")
    finally:
        with contextlib.suppress(Exception):
            await backend.close()
        for s in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(s)
