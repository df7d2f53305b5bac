"""Finding 5: no error path shows a password, on any backend's URL.

``perdure._masking`` is the one masking function; every ``PerdureError`` message goes
through it. The CLI tests feed a password-bearing URL of every column to the real
commands (bad parameters, unreachable servers, with and without PERDURE_DEBUG) and grep
everything written to stdout and stderr for the password.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from perdure._cli import app
from perdure._errors import BackendUnavailableError, ConfigurationError, PerdureError
from perdure._masking import mask_text, mask_url

SECRET = "S3cretPW"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://u:{SECRET}@h:5/db?x=1", "postgresql://u:***@h:5/db?x=1"),
        (f"postgresql://u:{SECRET}/x@h/db", "postgresql://u:***@h/db"),
        (f"postgresql://u:{SECRET}@x@h/db", "postgresql://u:***@h/db"),
        (f"postgresql://u:{SECRET}@[bad/db", "postgresql://u:***@[bad/db"),
        (f"postgresql://h/db?password={SECRET}", "postgresql://h/db?password=***"),
        (f"temporal://h/ns?api_key={SECRET}&tls=1", "temporal://h/ns?api_key=***&tls=1"),
        (
            f"temporal://h/ns?state=postgresql%3A%2F%2Fu%3A{SECRET}%40h%2Fdb",
            "temporal://h/ns?state=postgresql://u:***@h/db",
        ),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("sqlite:///tmp/p.db", "sqlite:///tmp/p.db"),
    ],
)
def test_mask_url_hides_every_form_of_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_mask_text_masks_urls_and_libpq_pairs_inside_text() -> None:
    text = f"cannot open 'dbos+postgresql://u:{SECRET}@h/db' (host=h password={SECRET} x=1)"
    masked = mask_text(text)
    assert SECRET not in masked
    assert "'dbos+postgresql://u:***@h/db'" in masked and "password=*** x=1" in masked


@pytest.mark.parametrize("kind", [PerdureError, ConfigurationError, BackendUnavailableError])
def test_every_typed_error_masks_its_message(kind: type[PerdureError]) -> None:
    assert SECRET not in str(kind(f"bad postgresql://u:{SECRET}@h/db"))


def _bad_urls(tmp_path: Path) -> list[str]:
    nested = f"postgresql%3A%2F%2Fu%3A{SECRET}%40127.0.0.1%3A1%2Fdb"
    return [
        # sqlite: an unknown option echoes the URL
        f"sqlite:///{tmp_path}/p.db?password={SECRET}",
        # postgresql: bad parameters, malformed, unreachable
        f"postgresql://u:{SECRET}@127.0.0.1/db?pool_size=x",
        f"postgresql://u:{SECRET}@127.0.0.1/db?schema=a-b",
        f"postgresql://u:{SECRET}@127.0.0.1/db?bogus_libpq_option=1",
        f"postgresql://u:{SECRET}@[::1/db",
        f"postgresql://u:{SECRET}@127.0.0.1:1/db",
        # DBOS: malformed, unreachable
        f"dbos+postgresql://u:{SECRET}@127.0.0.1:1/db",
        f"dbos+nosuch://u:{SECRET}@h/db",
        # Temporal: bad parameters around a nested password-bearing state URL, unreachable
        f"temporal://127.0.0.1:1/default?bogus=1&state={nested}",
        f"temporal://127.0.0.1:1/default?history_limit=1&state={nested}",
        f"temporal://127.0.0.1:1/default?state={nested}",
        # the registry: unknown scheme
        f"nosuch://u:{SECRET}@h/db",
    ]


@pytest.mark.parametrize("debug", ["", "1"], ids=["plain", "PERDURE_DEBUG"])
@pytest.mark.parametrize("command", [["runs", "list"], ["approve", "some-run", "--by", "ops"]])
def test_no_cli_error_shows_the_password_of_any_backend_url(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], command: list[str], debug: str
) -> None:
    for url in _bad_urls(tmp_path):
        result = CliRunner().invoke(
            app, [*command, "--url", url], env={"PERDURE_DEBUG": debug, "NO_COLOR": "1"}
        )
        captured = capfd.readouterr()
        everything = result.output + captured.out + captured.err
        assert result.exit_code != 0, (url, everything)
        assert "error:" in everything, (url, everything)
        assert SECRET not in everything, (url, everything)


def test_the_langgraph_saver_masks_the_password(tmp_path: Path) -> None:
    from perdure_langgraph.saver import PerdureSaver

    for url in (
        f"postgresql://u:{SECRET}@127.0.0.1/db?schema=a-b",
        f"sqlite:///{tmp_path}/p.db?password={SECRET}",
        f"mysql://u:{SECRET}@h/db",
    ):
        with pytest.raises(ConfigurationError) as info:
            PerdureSaver.from_url(url)
        assert SECRET not in str(info.value), url
