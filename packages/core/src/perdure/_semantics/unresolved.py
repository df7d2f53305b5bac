"""Recognizing an effect's error that says its outcome is unresolved.

perdure's gateway answers a call whose earlier attempt has an unknown outcome with
``409`` and the header ``Perdure-Outcome: unknown``, and never forwards it again. The
effect sees that answer as whatever its HTTP client raises for a 409 (urllib's
``HTTPError``, httpx's ``HTTPStatusError``, requests' ``HTTPError``, aiohttp's
``ClientResponseError``); each carries the status and headers under one of two
spellings, read here without importing any client. Only that explicit answer counts:
a bare 409 is the receiver's own business and is left to the retry policy.

The gateway's MCP proxy gives the same answer as a JSON-RPC error (code
``MCP_REFUSED``, ``data.error == "outcome_unknown"``), which the ``mcp`` client raises as
an ``MCPError`` carrying ``.error.code`` and ``.error.data``: recognized by that shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perdure._errors import OutcomeUnresolvedError

#: The header (and its value) on the gateway's ``409 outcome_unknown`` answers.
OUTCOME_HEADER = "Perdure-Outcome"
UNKNOWN = "unknown"
#: The JSON-RPC error code of the MCP proxy's own answers, and its ``data.error``.
MCP_REFUSED = -32050
MCP_UNKNOWN = "outcome_unknown"


def unresolved_outcome(exc: BaseException) -> str | None:
    """Why ``exc`` (or an error it wraps) says the outcome is unresolved; None if not."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OutcomeUnresolvedError):
            return str(current)
        if _is_gateway_answer(current):
            return (
                "the idempotency gateway answered 409 outcome_unknown: an earlier call "
                "with this step's idempotency key may or may not have been applied, and "
                "the gateway does not send it again. Check the receiver, run `perdure "
                "gateway forget UPSTREAM KEY`, then reconcile this step"
            )
        if _is_mcp_proxy_answer(current):
            return (
                "the idempotency gateway's MCP proxy answered outcome_unknown: an earlier "
                "tools/call with this step's idempotency key may or may not have been "
                "applied, and the proxy does not send it again. Check the upstream, run "
                "`perdure gateway forget mcp:NAME KEY`, then reconcile this step"
            )
        current = current.__cause__ or current.__context__
    return None


def _is_gateway_answer(exc: BaseException) -> bool:
    try:  # a client's property may raise when unset; such an error is no answer
        response: Any = getattr(exc, "response", None)
        status = _first(exc, response, ("status_code", "status", "code"))
        headers = _first(exc, response, ("headers",))
        if status != 409 or headers is None or not hasattr(headers, "get"):
            return False
        value = headers.get(OUTCOME_HEADER)
    except Exception:
        return False
    return isinstance(value, str) and value.strip().lower() == UNKNOWN


def _is_mcp_proxy_answer(exc: BaseException) -> bool:
    try:  # as above: an error whose attributes raise is no answer
        error: Any = getattr(exc, "error", None)
        code, data = getattr(error, "code", None), getattr(error, "data", None)
    except Exception:
        return False
    if code != MCP_REFUSED or not isinstance(data, Mapping):
        return False
    fields: Mapping[str, object] = data  # pyright: ignore[reportUnknownVariableType]
    return fields.get("error") == MCP_UNKNOWN


def _first(exc: BaseException, response: Any, names: tuple[str, ...]) -> Any:
    """The first of ``names`` set on the response the error carries, else on the error."""
    for owner in (response, exc):
        for name in names:
            value = getattr(owner, name, None) if owner is not None else None
            if value is not None:
                return value
    return None
