"""The run context of the embedded engine: the shared semantics (``perdure.semantics``).

Kept at this path for code that imports it; the semantics themselves live in
``perdure.semantics.context`` and the embedded engine's journal in ``driver.py``.
"""

from __future__ import annotations

from perdure.semantics.context import Cancelled, DriveContext, DriveStopped, Interrupt, ReplayEnd
from perdure.semantics.events import error_info

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
