"""The idempotency gateway as an ASGI app to mount in your own server (``perdure gateway
serve`` runs the same app). Needs ``perdure[gateway]``; see docs/GATEWAY.md."""

from perdure._gateway.http import GatewaySettings, create_app

__all__ = ["GatewaySettings", "create_app"]
