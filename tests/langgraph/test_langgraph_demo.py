"""``perdure demo --framework langgraph`` end to end: real processes, a real SIGKILL, one
charge on the ledger."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_langgraph_demo_charges_once_despite_the_sigkill(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "PERDURE_URL")}
    env["COLUMNS"] = "200"
    result = subprocess.run(
        [sys.executable, "-m", "perdure", "demo", "--framework", "langgraph"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "SIGKILL" in out and "interrupt() suspended the thread" in out, out
    assert "run succeeded: Refunded $129.00 for order 42" in out, out
    assert re.search(r"^order 42: 1 charge\(s\) of \$129\.00$", out, re.MULTILINE), out
    # The payment service saw the charge twice (before and after the kill), applied it once.
    assert re.search(r":charge_refund\s*│\s*42\s*│\s*\$129\.00\s*│\s*2\s*│\s*1\s*│", out), out
    assert "mail relay (no dedup): 1 request(s), 1 email(s) sent" in out, out
    assert "every order charged exactly once" in out, out
    assert list(tmp_path.iterdir()) == [], "the default demo keeps its database in a temp dir"
