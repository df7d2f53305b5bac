"""Paired counts of a LangGraph suite run: ``python paired_counts.py REPORT.jsonl``.

Prints how many tests ``SqliteSaver`` passed and how many of the same tests each
``PerdureSaver`` column passed, and lists every test the baseline passes that ours does
not. Exits 1 if there is one.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from perdure_suite import BASELINE, OURS

_PARAM = re.compile(rf"(?<=[\[-])({BASELINE}|{'|'.join(OURS)})(?=[\]-])")


def paired(report: Path) -> tuple[dict[str, dict[str, str]], list[str]]:
    """outcomes[column][test with the column replaced by CKPT], and the tests that
    use no checkpointer fixture."""
    outcomes: dict[str, dict[str, str]] = defaultdict(dict)
    plain: list[str] = []
    for line in report.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        found = _PARAM.search(row["test"])
        if found is None:
            plain.append(row["test"])
            continue
        key = row["test"][: found.start()] + "CKPT" + row["test"][found.end() :]
        outcomes[found.group(1)][key] = row["outcome"]
    return outcomes, plain


def main(path: str) -> int:
    outcomes, plain = paired(Path(path))
    base = outcomes[BASELINE]
    passed = sorted(k for k, v in base.items() if v == "passed")
    print(f"LangGraph suite: {len(base)} checkpointer tests per column ({len(plain)} others)")
    print(f"  {BASELINE:<22} passed {len(passed)}")
    missing: dict[str, list[str]] = {}
    for column in OURS:
        ours = outcomes[column]
        ok = sum(1 for k in passed if ours.get(k) == "passed")
        extra = sum(1 for k, v in ours.items() if v == "passed" and base.get(k) != "passed")
        missing[column] = [k for k in passed if ours.get(k) != "passed"]
        print(
            f"  {column:<22} passed {ok} of those {len(passed)}"
            f" (+{extra} the baseline does not pass); fails {len(missing[column])}"
        )
    for column, tests in missing.items():
        for test in tests:
            print(f"  FAILS on {column} (SqliteSaver passes): {test}: {outcomes[column].get(test)}")
    return 1 if any(missing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
