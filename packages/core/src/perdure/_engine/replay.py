"""The run context of the embedded engine: the shared semantics (``perdure._semantics``).

Kept at this path for code that imports it; the semantics themselves live in
``perdure._semantics.context`` and the embedded engine's journal in ``driver.py``.
"""

from __future__ import annotations

from perdure._semantics.context import Cancelled, DriveContext, DriveStopped, Interrupt, ReplayEnd
from perdure._semantics.events import error_info

#: The embedded engine's ``RunContext`` is the shared one, on a ``RunDriver`` journal.
EmbeddedRunContext = DriveContext

__all__ = [
    "Cancelled",
    "DriveStopped",
    "EmbeddedRunContext",
    "Interrupt",
    "ReplayEnd",
    "error_info",
]
