"""The receiver's waits (``perdure.testing.Receiver``) time out on a stall, never at a
fixed deadline: a loaded machine makes a test slow, not wrong."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from perdure.testing import Receiver
from perdure.testing.receivers import post


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def test_a_hold_is_reached_and_released(receiver: Receiver) -> None:
    hold = receiver.hold("charge", "after")
    sender = threading.Thread(target=post, args=(f"{receiver.url}/plain/charge", {}))
    sender.start()
    receiver.wait_held(hold)
    assert receiver.applied["charge"] == 1
    hold.release.set()
    sender.join()


def test_a_wait_with_nothing_moving_times_out(receiver: Receiver) -> None:
    hold = receiver.hold("charge", "before")
    with pytest.raises(TimeoutError, match="nothing moved"):
        receiver.wait_held(hold, timeout=0.1)
    with pytest.raises(TimeoutError, match="nothing moved"):
        receiver.wait_requests("charge", 1, timeout=0.1)


def test_a_wait_outlasts_its_stall_while_the_caller_sees_progress(receiver: Receiver) -> None:
    """``watch`` changes at every look, so the wait goes on for many stalls' worth of
    time; the request comes only at the fourth look and is still taken."""
    hold = receiver.hold("charge", "before")
    looks = itertools.count(1)

    def watch() -> int:
        look = next(looks)
        if look == 4:
            threading.Thread(target=post, args=(f"{receiver.url}/plain/charge", {})).start()
        return look

    receiver.wait_held(hold, timeout=0.01, watch=watch)
    assert next(looks) > 4
    hold.release.set()


def test_counting_waits_return_once_the_count_is_reached(receiver: Receiver) -> None:
    post(f"{receiver.url}/plain/other", {})
    threading.Thread(target=post, args=(f"{receiver.url}/plain/charge", {})).start()
    receiver.wait_requests("charge", 1, timeout=5.0)
    assert receiver.wait_settled("charge")
