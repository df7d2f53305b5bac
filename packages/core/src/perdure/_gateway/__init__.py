"""The idempotency gateway: put it in front of a side-effecting HTTP service (or MCP
server) that does not deduplicate, and a call carrying an idempotency key reaches it at
most once — across retries, concurrent duplicates and the gateway's own crashes.

The attempt is recorded in perdure's store before the call leaves; the answer is stored
and replayed to every retry; an attempt whose outcome is unknown (the gateway died
mid-call) is reported as such and never re-sent. With it in front, a tool calling such a
service can be declared ``@perdure.effect(idempotent_receiver=True)``.

``perdure gateway serve`` / ``perdure gateway mcp`` run it; ``create_app`` gives the ASGI
app to mount in your own server. Needs ``perdure[gateway]``. See docs/GATEWAY.md.
"""

from perdure._gateway.http import GatewaySettings, create_app
from perdure._gateway.ledger import Ledger, open_ledger
from perdure._gateway.records import Attempt, StoredResponse

__all__ = ["Attempt", "GatewaySettings", "Ledger", "StoredResponse", "create_app", "open_ledger"]
