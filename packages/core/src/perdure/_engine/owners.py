"""Owner ids for leases, and telling whether the process behind one has died.

An owner id is ``host:pid:start-ticks:nonce``. On the same host a worker can see that
the owning process is gone (SIGKILL, OOM) and break its lease at once instead of
waiting for it to expire; across hosts only expiry frees a lease.
"""

from __future__ import annotations

import os
import socket
import uuid
from functools import cache


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot); None when it is gone.

    A zombie (exited, not yet reaped by its parent) is gone: it runs nothing and holds
    nothing, and under a parent that reaps late (a container without an init, a test
    harness) it can linger for the parent's whole life."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces; fields resume after the last ')'.
    fields = stat.rpartition(")")[2].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


@cache
def _host() -> str:
    return socket.gethostname().replace(":", "_")


def new_owner_id() -> str:
    pid = os.getpid()
    return f"{_host()}:{pid}:{_start_ticks(pid) or '0'}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` ran on this host and its process no longer exists."""
    parts = owner.split(":")
    if len(parts) != 4 or parts[0] != _host():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    ticks = _start_ticks(pid)
    if ticks is None:
        return True
    return parts[2] != "0" and ticks != parts[2]  # the pid was reused by another process
