"""A workflow whose one effect goes to a receiver that does not deduplicate (the
Receiver's ``/plain`` endpoint), through the gateway (``PERDURE_TEST_GATEWAY``). With the
gateway in front, the effect is declared ``idempotent_receiver=True``: a retry after a
crash re-sends with the same key, and the gateway answers it from its ledger."""

from __future__ import annotations

import os
from typing import Any

import perdure
from perdure.testing import post


@perdure.effect(idempotent_receiver=True)
def send_mail(to: str) -> dict[str, Any]:
    url = f"{os.environ['PERDURE_TEST_GATEWAY']}/recv/plain/mail"
    return post(url, {"to": to}, key=perdure.idempotency_key())


@perdure.workflow(name="notify")
async def notify(to: str) -> dict[str, Any]:
    return await send_mail(to)
