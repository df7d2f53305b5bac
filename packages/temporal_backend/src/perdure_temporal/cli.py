"""``perdure temporal ...``: the Temporal commands of the ``perdure`` CLI (entry-point
group ``perdure.cli``)."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

import typer

from perdure.spi import ConfigurationError, resolve_url, run_cli_command
from perdure_temporal.payloads import open_payloads
from perdure_temporal.pg_payloads import PostgresPayloads
from perdure_temporal.setup import ensure_search_attributes
from perdure_temporal.url import TemporalUrl

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

app = typer.Typer(
    help="Temporal: prepare a namespace for perdure; clean the payloads stored aside.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)


@app.command()
def setup(
    url: Annotated[
        str | None,
        typer.Option("--url", help="temporal://host:port/namespace (default: $PERDURE_URL)."),
    ] = None,
) -> None:
    """Create perdure's search attributes (PerdureStatus, PerdureWorkflow, both Keyword)
    on the URL's namespace, once; workers never create them. On Temporal Cloud, use
    `tcld namespace search-attributes add` instead (its OperatorService is closed)."""

    async def body() -> None:
        added = await ensure_search_attributes(resolve_url(url))
        typer.echo(
            f"added: {', '.join(added)}" if added else "perdure's search attributes are present"
        )

    run_cli_command(body)


def age_seconds(text: str) -> float:
    """``30d``, ``12h``, ``90m`` or ``45s`` in seconds."""
    m = _AGE.match(text)
    if m is None:
        raise ConfigurationError(f"--older-than {text!r}: give a number and a unit: 30d, 12h, 90m")
    return float(m[1]) * _UNIT_SECONDS[m[2]]


@app.command("prune-payloads")
def prune_payloads(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Delete payloads last written longer ago than this: 30d, 12h, 90m. Choose it "
            "longer than the namespace's retention plus the longest a run lives.",
            show_default=False,
        ),
    ],
    url: Annotated[
        str | None,
        typer.Option(
            "--url", help="temporal://...?payloads=postgresql%3A... (default: $PERDURE_URL)."
        ),
    ] = None,
) -> None:
    """Delete the payloads stored aside in PostgreSQL (``payloads=postgresql://...``) that
    no run wrote for --older-than: the store's retention, run from one host on a schedule.
    Payloads are content-addressed and shared between runs, so deleting a run
    (``perdure runs prune``) leaves them; this removes those nobody wrote since."""
    seconds = age_seconds(older_than)

    async def body() -> None:
        config = TemporalUrl.parse(resolve_url(url))
        store = open_payloads(config)
        if not isinstance(store, PostgresPayloads):
            raise ConfigurationError(
                f"payloads are kept in the directory {config.payloads} (one host): "
                "prune-payloads cleans a payloads=postgresql://... store"
            )
        try:
            deleted = await asyncio.to_thread(store.prune, older_than=seconds)
        finally:
            store.close()
        typer.echo(f"deleted {deleted} payload(s) last written more than {older_than} ago")

    run_cli_command(body)
