"""Paired counts of a LangGraph suite run:
``python paired_counts.py REPORT.jsonl [--rerun RERUN.jsonl] [--list-failing]``.

Prints how many tests ``SqliteSaver`` passed and how many of the same tests each
``PerdureSaver`` column passed, first in the whole run and then counting the tests that
passed when run again alone (``RERUN.jsonl``, written by ``nox -s langgraph_suite``), and
lists every test the baseline passes that ours does not. Exits 1 if there is one.
``--list-failing`` prints only the node ids of those tests, for the next re-run.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from perdure_suite import BASELINE, OURS

_PARAM = re.compile(rf"(?<=[\[-])({BASELINE}|{'|'.join(OURS)})(?=[\]-])")


def paired(report: Path) -> tuple[dict[str, dict[str, str]], list[str]]:
    """outcomes[column][test with the column replaced by CKPT], and the tests that
    use no checkpointer fixture."""
    outcomes: dict[str, dict[str, str]] = defaultdict(dict)
    plain: list[str] = []
    if not report.exists():
        return outcomes, plain
    for line in report.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        found = _PARAM.search(row["test"])
        if found is None:
            plain.append(row["test"])
            continue
        key = row["test"][: found.start()] + "CKPT" + row["test"][found.end() :]
        outcomes[found.group(1)][key] = row["outcome"]
    return outcomes, plain


def _node(key: str, column: str) -> str:
    return key.replace("CKPT", column, 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("report", type=Path)
    parser.add_argument("--rerun", type=Path)
    parser.add_argument("--list-failing", action="store_true")
    opts = parser.parse_args()
    outcomes, plain = paired(opts.report)
    again, _ = paired(opts.rerun) if opts.rerun else ({}, [])
    base = outcomes[BASELINE]
    passed = sorted(k for k, v in base.items() if v == "passed")
    first: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    for column in OURS:
        ours = outcomes[column]
        first[column] = [k for k in passed if ours.get(k) != "passed"]
        alone = again.get(column, {})
        missing[column] = [k for k in first[column] if alone.get(k) != "passed"]
    if opts.list_failing:
        print("\n".join(_node(k, column) for column, keys in missing.items() for k in keys))
        return 0
    print(f"LangGraph suite: {len(base)} checkpointer tests per column ({len(plain)} others)")
    print(f"  {BASELINE:<22} passed {len(passed)}")
    for column in OURS:
        ours = outcomes[column]
        extra = sum(1 for k, v in ours.items() if v == "passed" and base.get(k) != "passed")
        print(
            f"  {column:<22} passed {len(passed) - len(first[column])} of those {len(passed)}"
            f" in the run, {len(passed) - len(missing[column])} with the ones that passed"
            f" alone (+{extra} the baseline does not pass); fails {len(missing[column])}"
        )
    for column in OURS:
        for key in first[column]:
            if key not in missing[column]:
                print(f"  passed alone on {column} (failed in the loaded run): {key}")
    for column, keys in missing.items():
        for key in keys:
            print(f"  FAILS on {column} (SqliteSaver passes): {key}: {outcomes[column].get(key)}")
    return 1 if any(missing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
