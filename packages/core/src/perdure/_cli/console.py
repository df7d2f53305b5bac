"""``perdure console``: serve the web console with uvicorn."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from perdure._cli.common import EXIT_CONFIG, CliError, UsageProblem, err, mask_url
from perdure._config import resolve_url

SECRET_ENV = "PERDURE_CONSOLE_SECRET"
METRICS_TOKEN_ENV = "PERDURE_METRICS_TOKEN"


def _read(option: str, path: Path | None, env: str) -> str | None:
    """A secret from the file ``option`` names, else from ``$env``, else None."""
    if path is not None:
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageProblem(f"{option} {str(path)!r}: {exc.strerror}") from exc
        if not value:
            raise UsageProblem(f"{option} {str(path)!r} is empty")
        return value
    return os.environ.get(env, "").strip() or None


def read_secret(secret_file: Path | None) -> tuple[str, bool]:
    """The operators' shared secret and whether it was made up for this process."""
    secret = _read("--secret-file", secret_file, SECRET_ENV)
    if secret is not None:
        return secret, False
    return secrets.token_urlsafe(18), True


def read_metrics_token(token_file: Path | None) -> str | None:
    """The scrapers' bearer token for /metrics; None: operators' login only."""
    token = _read("--metrics-token-file", token_file, METRICS_TOKEN_ENV)
    if token is not None and len(token) < 16:
        raise UsageProblem("the metrics token must be at least 16 characters")
    return token


def serve(
    url: str | None,
    host: str,
    port: int,
    secret_file: Path | None,
    metrics_token_file: Path | None = None,
) -> None:
    try:
        import uvicorn

        from perdure._console import ConsoleSettings, create_app
    except ImportError as exc:
        raise CliError(
            f"the console needs the console extra: pip install 'perdure[console]' ({exc})",
            EXIT_CONFIG,
        ) from exc
    secret, generated = read_secret(secret_file)
    if len(secret) < 8:
        raise UsageProblem("the console secret must be at least 8 characters")
    token = read_metrics_token(metrics_token_file)
    resolved = resolve_url(url)
    app = create_app(ConsoleSettings(secret=secret, url=resolved, metrics_token=token))
    console = err()
    console.print(
        f"perdure console on http://{host}:{port} for {mask_url(resolved)}",
        markup=False,
        soft_wrap=True,
    )
    console.print(
        "/metrics: for a scraper's bearer token and logged-in operators"
        if token is not None
        else f"/metrics: for logged-in operators (set ${METRICS_TOKEN_ENV} or "
        "--metrics-token-file for a scraper)",
        markup=False,
        soft_wrap=True,
    )
    if generated:
        console.print(
            f"operators log in with the secret {secret} "
            f"(set ${SECRET_ENV} or --secret-file to choose one)",
            markup=False,
            soft_wrap=True,
        )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
