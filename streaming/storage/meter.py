"""What this process's downloads are receiving now: bytes, and connections that are receiving.

The node's download schedule (``streaming.cache.concurrency.Concurrency``) sizes how many
transfers to keep in flight from how fast each one receives: while adding transfers leaves each
one's rate where it was, the link has room; once each gets less, the link (or this process) is
full. Finished downloads are too coarse for that (a 4 MB shard arrives all at once after
half a second), so every ranged or whole GET reports here as its chunks arrive.

A connection counts as receiving from its response's first byte (the headers) to its end, so
the time to first byte does not lower the rate per connection. That time is kept apart: the
lowest seen (``first_byte_wait``) tells how long a transfer waits before it receives anything,
which sets how many transfers a long-latency link needs in flight.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ['METER', 'Meter']


class Meter:
    """Bytes received and connection-seconds spent receiving, both cumulative."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start from nothing, with a fresh lock (a forked child's copy may be held for ever)."""
        self._lock = threading.Lock()
        self._bytes = 0
        self._gets = 0  # Responses received (each GET, whole or ranged).
        self._taken = (0, 0)  # (bytes, gets) already handed out by ``take``.
        self._open = 0
        self._area = 0.0  # Connection-seconds spent receiving.
        self._wait: float | None = None  # Lowest seconds from a request to its first byte.
        self._at = time.monotonic()

    def _tick(self, now: float) -> None:
        self._area += self._open * (now - self._at)
        self._at = now

    def opened(self, sent: float | None = None) -> None:
        """A response's first byte arrived: one more connection receiving.

        ``sent``: when its request left (``time.monotonic()``), to measure the time to first byte.
        """
        with self._lock:
            now = time.monotonic()
            self._tick(now)
            self._open += 1
            self._gets += 1
            if sent is not None:
                wait = max(0.0, now - sent)
                self._wait = wait if self._wait is None else min(self._wait, wait)

    def closed(self) -> None:
        """A response ended (read to its end or abandoned)."""
        with self._lock:
            self._tick(time.monotonic())
            self._open = max(0, self._open - 1)

    def received(self, nbytes: int) -> None:
        with self._lock:
            self._bytes += nbytes

    def take(self) -> tuple[int, int]:
        """(Bytes received, GETs answered) since the last ``take``.

        Each is handed out once, so deltas taken by several threads add up to the process's.
        """
        with self._lock:
            taken, self._taken = self._taken, (self._bytes, self._gets)
            return self._bytes - taken[0], self._gets - taken[1]

    def first_byte_wait(self) -> float | None:
        """The lowest time to first byte seen (seconds), or None before any response."""
        with self._lock:
            return self._wait

    def reading(self) -> tuple[int, float, int]:
        """(Bytes received, connection-seconds receiving, connections receiving now)."""
        with self._lock:
            self._tick(time.monotonic())
            return self._bytes, self._area, self._open


METER = Meter()

if hasattr(os, 'register_at_fork'):
    # A DataLoader worker forked while a download thread held the lock would otherwise block on
    # its first download; and the parent's transfers are not the child's.
    os.register_at_fork(after_in_child=METER.reset)
