"""The ``perdure`` CLI run as its own process, as an operator runs it."""

from __future__ import annotations

import subprocess
import sys


def perdure_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perdure", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
