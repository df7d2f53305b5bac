"""``dbos_patchy`` as first deployed (``test_dbos_patch``)."""

from __future__ import annotations

import os

import perdure
from perdure.testing import post


@perdure.step
def mid(path: str) -> str:
    return str(post(f"{os.environ['PERDURE_TEST_RECEIVER']}/plain/{path}", {})["id"])


@perdure.workflow(name="dbos_patchy")
async def patchy() -> list[str]:
    first = await mid("old_mid")
    decision = await perdure.wait_for_signal("go")
    return [first, str(decision)]
