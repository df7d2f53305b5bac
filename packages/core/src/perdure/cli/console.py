"""``perdure console``: serve the web console with uvicorn."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from perdure.cli.common import EXIT_CONFIG, CliError, UsageProblem, err, mask_url
from perdure.config import resolve_url

SECRET_ENV = "PERDURE_CONSOLE_SECRET"


def read_secret(secret_file: Path | None) -> tuple[str, bool]:
    """The operators' shared secret and whether it was made up for this process."""
    if secret_file is not None:
        try:
            secret = secret_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageProblem(f"--secret-file {str(secret_file)!r}: {exc.strerror}") from exc
        if not secret:
            raise UsageProblem(f"--secret-file {str(secret_file)!r} is empty")
        return secret, False
    secret = os.environ.get(SECRET_ENV, "").strip()
    if secret:
        return secret, False
    return secrets.token_urlsafe(18), True


def serve(url: str | None, host: str, port: int, secret_file: Path | None) -> None:
    try:
        import uvicorn

        from perdure.console import ConsoleSettings, create_app
    except ImportError as exc:
        raise CliError(
            f"the console needs the console extra: pip install 'perdure[console]' ({exc})",
            EXIT_CONFIG,
        ) from exc
    secret, generated = read_secret(secret_file)
    if len(secret) < 8:
        raise UsageProblem("the console secret must be at least 8 characters")
    resolved = resolve_url(url)
    app = create_app(ConsoleSettings(secret=secret, url=resolved))
    console = err()
    console.print(
        f"perdure console on http://{host}:{port} for {mask_url(resolved)}",
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
