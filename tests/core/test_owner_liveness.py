"""Telling whether the process behind an owner id is gone (``perdure._engine.owners``):
a worker takes a dead owner's runs at once, and must never take a live one's."""

from __future__ import annotations

import os
import subprocess
import sys

from perdure._engine.owners import new_owner_id, owner_is_dead


def owner_of(proc: subprocess.Popen[bytes]) -> str:
    """The owner id ``proc`` would have made for itself (it prints its own)."""
    assert proc.stdout is not None
    return proc.stdout.readline().decode().strip()


def child() -> subprocess.Popen[bytes]:
    code = (
        "import sys; from perdure._engine.owners import new_owner_id; "
        "print(new_owner_id(), flush=True); sys.stdin.read()"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


def test_a_live_process_is_not_dead() -> None:
    proc = child()
    try:
        assert not owner_is_dead(owner_of(proc))
    finally:
        proc.kill()
        proc.wait()


def test_this_process_is_never_dead() -> None:
    assert not owner_is_dead(new_owner_id())


def test_a_reaped_process_is_dead() -> None:
    proc = child()
    owner = owner_of(proc)
    proc.kill()
    proc.wait()
    assert owner_is_dead(owner)


def test_a_zombie_not_yet_reaped_by_its_parent_is_dead() -> None:
    """An exited process whose parent has not waited for it still has its /proc entry
    (state Z, same start time): it holds nothing, and a DBOS run it drove would wait
    forever for a recovery that its zombie's pid blocks."""
    proc = child()
    owner = owner_of(proc)
    assert proc.stdin is not None
    proc.stdin.close()  # it exits ...
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ... and is not reaped
    try:
        assert owner_is_dead(owner)
    finally:
        proc.wait()


def test_another_host_is_never_judged_dead() -> None:
    assert not owner_is_dead("elsewhere:1:1:abcd")
