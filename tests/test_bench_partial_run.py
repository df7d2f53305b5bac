"""``python -m benchmarks --only X`` replaces X's figures and charts and nothing else: the
other modules' figures and charts and the hand-written sections of RESULTS.md stay.

The harness runs two tiny fake benchmark scripts written to a temporary directory
(through its ``Layout`` seam); no real benchmark runs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from benchmarks import _budget, _document
from benchmarks.__main__ import Bench, Layout, main

FAKE = """
import argparse, os
from benchmarks._results import Figure, add_json_argument, write_json

parser = argparse.ArgumentParser()
add_json_argument(parser)
ns = parser.parse_args()
value = float(os.environ["FAKE_BENCH_{name}"])
print("fake {name} measured", value)
write_json(ns.json, [Figure({figure!r}, {section!r}, {subject!r}, "µs", [value], **{extra})])
"""
ALPHA = {
    "figure": "alpha.step",
    "section": "per-step overhead",
    "subject": "alpha step",
    "extra": {},
}
BETA = {
    "figure": "scale.history.mean",
    "section": "scale",
    "subject": "beta history",
    "extra": {"series": "history sqlite", "x": 10.0, "params": {"store": "sqlite", "history": 10}},
}
HAND_WRITTEN = "## Gamma (run on its own, not in the sitting above)\n\nWritten by hand: 42 ms.\n"
TAIL_NOTE = "## Notes by hand\n\nKept as written.\n"


def fake_bench(tmp: Path, name: str, spec: dict[str, object]) -> Bench:
    script = tmp / f"{name}.py"
    script.write_text(textwrap.dedent(FAKE.format(name=name, **spec)), encoding="utf-8")
    return Bench(name, [str(script)], [], [], script)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    benches = [fake_bench(tmp_path, "alpha", ALPHA), fake_bench(tmp_path, "beta", BETA)]
    return Layout(tmp_path / "RESULTS.md", tmp_path / "results", benches)


def outside_generated(text: str) -> str:
    """``text`` without the generated parts' contents: what a run must not change."""
    for start, stop in sorted(_document.spans(text, "t").values(), reverse=True):
        text = text[:start] + text[stop:]
    return text


def add_hand_written(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    cut = text.index(_document.end("summary")) + len(_document.end("summary")) + 1
    text = text[:cut] + "\n" + HAND_WRITTEN + "\n" + text[cut:] + "\n" + TAIL_NOTE
    report.write_text(text, encoding="utf-8")


def full_then_hand_written(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_BENCH_alpha", "111")
    monkeypatch.setenv("FAKE_BENCH_beta", "333")
    assert main([], layout) == 0
    add_hand_written(layout.report)


def test_partial_run_keeps_other_modules_and_hand_written_sections(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_then_hand_written(layout, monkeypatch)
    before = layout.report.read_text(encoding="utf-8")
    assert "111 µs" in before and "333 µs" in before
    beta_chart = layout.results / "beta_history.png"
    beta_record = layout.results / "beta.record.json"
    chart_bytes, record_text = beta_chart.read_bytes(), beta_record.read_text(encoding="utf-8")

    monkeypatch.setenv("FAKE_BENCH_alpha", "222")
    monkeypatch.setenv("FAKE_BENCH_beta", "999")  # would show if beta ran again
    assert main(["--only", "alpha"], layout) == 0

    after = layout.report.read_text(encoding="utf-8")
    assert outside_generated(after) == outside_generated(before)
    assert HAND_WRITTEN in after and after.endswith(TAIL_NOTE)
    assert "222 µs" in after and "111 µs" not in after
    assert "333 µs" in after and "999 µs" not in after
    assert "fake beta measured 333" in after  # beta's raw output kept
    assert beta_chart.read_bytes() == chart_bytes
    assert "(results/beta_history.png)" in after
    assert beta_record.read_text(encoding="utf-8") == record_text


def test_partial_run_refuses_to_drop_a_module_it_has_no_record_of(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_then_hand_written(layout, monkeypatch)
    before = layout.report.read_text(encoding="utf-8")
    (layout.results / "beta.record.json").unlink()

    monkeypatch.setenv("FAKE_BENCH_alpha", "222")
    assert main(["--only", "alpha"], layout) == 1

    assert layout.report.read_text(encoding="utf-8") == before
    record = json.loads((layout.results / "alpha.record.json").read_text(encoding="utf-8"))
    assert [f["value"] for f in record["figures"]] == [222.0]


def test_only_rejects_an_unknown_module(layout: Layout, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--only", "nosuch"], layout)
    assert "no benchmark named nosuch" in capsys.readouterr().err


def test_a_module_declares_its_budget(tmp_path: Path) -> None:
    declared, silent, bad = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    declared.write_text("import os\nBENCH_BUDGET_SECONDS = 480\n", encoding="utf-8")
    silent.write_text("SOMETHING = 1\n", encoding="utf-8")
    bad.write_text("\nBENCH_BUDGET_SECONDS = os.cpu_count()\n", encoding="utf-8")
    assert Bench("a", [], [], [], declared).budget == 480.0
    assert Bench("b", [], [], [], silent).budget == _budget.DEFAULT_SECONDS
    with pytest.raises(_budget.BudgetError, match=r"c\.py:2: BENCH_BUDGET_SECONDS"):
        _budget.declared(bad)


def test_splice_refuses_an_unclosed_generated_part() -> None:
    text = _document.begin("summary") + "\n# old\n"
    with pytest.raises(_document.MarkerError, match=r"RESULTS\.md: generated part"):
        _document.splice(text, {"summary": "# new"}, "RESULTS.md")


def test_splice_refuses_a_report_without_markers() -> None:
    with pytest.raises(_document.MarkerError, match="no generated-part markers"):
        _document.splice("# by hand\n", {"summary": "# new"}, "RESULTS.md")
