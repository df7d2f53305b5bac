"""``dbos_patchy`` as deployed next, behind a patch marker (``test_dbos_patch``)."""

from __future__ import annotations

from dbos_patch_old import mid

import perdure


@perdure.workflow(name="dbos_patchy")
async def patchy() -> list[str]:
    first = await mid("new_mid") if perdure.patched("new-mid") else await mid("old_mid")
    decision = await perdure.wait_for_signal("go")
    return [first, str(decision)]
