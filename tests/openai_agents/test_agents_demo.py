"""``perdure demo`` end to end: real processes, a real SIGKILL, one charge on the ledger."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from perdure._records import RunInfo, RunStatus
from perdure._registry import open_backend

PG_SERVER = os.environ.get("PERDURE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def run_demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m perdure demo ARGS`` on the scripted model (no API key), output unwrapped."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PERDURE_URL")}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "perdure", "demo", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def assert_one_charge(result: subprocess.CompletedProcess[str]) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "SIGKILL" in out, out
    assert "run succeeded" in out, out
    assert re.search(r"^order 42: 1 charge\(s\) of \$129\.00$", out, re.MULTILINE), out
    # The payment service saw the charge twice (before and after the kill), applied it once.
    assert re.search(r":charge_refund\s*│\s*42\s*│\s*\$129\.00\s*│\s*2\s*│\s*1\s*│", out), out
    assert "mail relay (no dedup): 1 request(s), 1 email(s) sent" in out, out
    assert "every order charged exactly once" in out, out


@pytest.fixture
def pg_demo_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for the demo, dropped afterwards."""
    schema = f"demo_{secrets.token_hex(6)}"
    sep = "&" if "?" in PG_SERVER else "?"
    try:
        yield f"{PG_SERVER}{sep}schema={schema}"
    finally:
        with psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def test_demo_on_the_default_sqlite(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert_one_charge(result)
    assert list(tmp_path.iterdir()) == [], "the default demo keeps its database in a temp dir"


def test_demo_on_postgresql(tmp_path: Path, pg_demo_url: str) -> None:
    result = run_demo(tmp_path, "--url", pg_demo_url)
    assert_one_charge(result)
    runs = asyncio.run(list_runs(pg_demo_url))
    assert [(info.run_id.startswith("refund-42-"), info.status) for info in runs] == [
        (True, RunStatus.SUCCEEDED)
    ], "the demo ran on the --url backend"


async def list_runs(url: str) -> list[RunInfo]:
    async with open_backend(url) as backend:
        return await backend.list_runs()
