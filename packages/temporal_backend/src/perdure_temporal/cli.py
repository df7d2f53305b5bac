"""``perdure temporal ...``: the Temporal commands of the ``perdure`` CLI (entry-point
group ``perdure.cli``)."""

from __future__ import annotations

from typing import Annotated

import typer

from perdure.spi import resolve_url, run_cli_command
from perdure_temporal.setup import ensure_search_attributes

app = typer.Typer(
    help="Temporal: prepare a namespace for perdure.",
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
