"""The download meter across fork: a child never inherits a held lock or the parent's counts."""

from __future__ import annotations

import os
import time

import pytest

from streaming.storage.meter import METER, Meter


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='fork only')
def test_child_forked_while_meter_locked_can_use_it() -> None:
    METER.received(123)
    METER._lock.acquire()  # A download thread mid-update at the moment of the fork.
    try:
        pid = os.fork()
        if pid == 0:  # The child: without the fork hook this blocks for ever.
            try:
                METER.received(5)
                nbytes, _, connections = METER.reading()
                os._exit(0 if (nbytes, connections) == (5, 0) else 3)
            except BaseException:  # noqa: BLE001
                os._exit(4)
    finally:
        METER._lock.release()
    status_seen, deadline = None, time.monotonic() + 60  # Room for a loaded machine.
    while status_seen is None and time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            status_seen = status
        else:
            time.sleep(0.05)
    if status_seen is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail('the forked child blocked on the meter lock it inherited held')
    assert os.waitstatus_to_exitcode(status_seen) == 0
    assert METER.reading()[0] >= 123  # The parent's counts are its own.


def test_meter_keeps_the_lowest_time_to_first_byte() -> None:
    meter = Meter()
    assert meter.first_byte_wait() is None
    meter.opened()  # Without the request's time: nothing to measure.
    assert meter.first_byte_wait() is None
    meter.opened(time.monotonic() - 5.0)
    assert (meter.first_byte_wait() or 0.0) >= 5.0
    meter.opened(time.monotonic() - 0.1)
    wait = meter.first_byte_wait()
    assert wait is not None and 0.1 <= wait < 5.0
    meter.opened(time.monotonic() - 3.0)  # A slower response does not raise it.
    assert meter.first_byte_wait() == wait
    meter.reset()
    assert meter.first_byte_wait() is None
