"""``python -m benchmarks`` (``nox -s bench``): every benchmark, one after the other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = (
    ["-m", "benchmarks.engine_steps"],
    ["-m", "benchmarks.agents_turns"],
    [str(ROOT / "benchmarks" / "langgraph_superstep.py")],
    ["-m", "benchmarks.dbos_steps"],
)


def main() -> int:
    failed = 0
    for argv in BENCHMARKS:
        print(f"\n=== {' '.join(argv)}", flush=True)
        failed |= subprocess.call([sys.executable, *argv], cwd=ROOT)
    return failed


if __name__ == "__main__":
    sys.exit(main())
