"""Workflows the CLI tests start in-process (module-level, so they are registered)."""

from __future__ import annotations

from typing import Any

import perdure
from perdure._errors import OutcomeUnknownError


def _greeting(name: str) -> str:
    return f"hello {name}"


@perdure.workflow
async def greet(name: str) -> dict[str, Any]:
    """One step, then wait for a human's approval."""
    text = await perdure.run_step("compose", _greeting, name)
    decision = await perdure.wait_for_signal("approval")
    return {"text": text, "decision": decision}


@perdure.effect(name="charge")
async def charge(cents: int) -> str:
    raise OutcomeUnknownError(f"the payment API timed out charging {cents}")


@perdure.workflow
async def pay(cents: int) -> str:
    """A non-idempotent effect whose outcome is unknown: the run parks."""
    return await charge(cents)
