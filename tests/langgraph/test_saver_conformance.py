"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against PerdureSaver.

Wired as the package intends: a ``@checkpointer_test`` async-generator factory that
yields a fresh saver per capability suite (and closes it after), run by ``validate``,
whose report must say FULL with every base and extended capability detected and passed.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability
from langgraph.checkpoint.conformance.report import CapabilityReport

from perdure_langgraph import PerdureSaver


def _describe(report: CapabilityReport) -> str:
    lines = [f"{report.checkpointer_name}: {report.conformance_level()}"]
    for name, result in sorted(report.results.items()):
        lines.append(
            f"  {name}: detected={result.detected} passed={result.passed} "
            f"({result.tests_passed} passed, {result.tests_failed} failed)"
        )
        lines.extend(f"    {failure}" for failure in result.failures)
    return "\n".join(lines)


async def test_conformance_full(lg_store: str, lg_url: str) -> None:
    """Base and extended capabilities (put, put_writes, get_tuple, list, delete_thread,
    delete_for_runs, copy_thread, prune) all detected and passing: level FULL."""

    @checkpointer_test(name=f"PerdureSaver[{lg_store}]-{secrets.token_hex(3)}")
    async def perdure_saver() -> AsyncGenerator[PerdureSaver, None]:
        saver = PerdureSaver.from_url(lg_url)
        try:
            yield saver
        finally:
            await saver.aclose()

    report = await validate(perdure_saver)
    report.print_report()
    detail = _describe(report)
    assert {Capability(name) for name, r in report.results.items() if r.detected} == set(
        ALL_CAPABILITIES
    ), detail
    assert report.passed_all_base(), detail
    assert report.passed_all(), detail
    assert report.conformance_level() == "FULL", detail
    for name, result in report.results.items():
        assert result.passed is True and result.tests_failed == 0, (name, detail)
        assert result.tests_passed > 0, (name, detail)
