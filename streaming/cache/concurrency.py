"""How many downloads the node keeps in flight: ``STREAMING_DOWNLOADS_IN_FLIGHT``, or adaptive.

Used by the node's download schedule (``streaming.cache.prefetch``) and replayed by
``streaming.plan.simulate`` with a simulated meter.
"""

from __future__ import annotations

import os
import time

from streaming.storage.meter import METER, Meter

__all__ = ['IN_FLIGHT_ENV', 'Concurrency', 'in_flight_setting']

IN_FLIGHT_ENV = 'STREAMING_DOWNLOADS_IN_FLIGHT'


def in_flight_setting() -> int | None:
    """``STREAMING_DOWNLOADS_IN_FLIGHT`` as a count, or None (unset or ``auto``: adaptive)."""
    value = os.environ.get(IN_FLIGHT_ENV, '').strip().lower()
    if value in ('', 'auto'):
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f'{IN_FLIGHT_ENV}={value!r} must be a positive integer or "auto".')
    return count


class Concurrency:
    """How many downloads to keep in flight: fixed, or grown while each transfer's rate holds.

    The signal is what this process's transfers receive (``streaming.storage.meter``): bytes
    per connection-second of receiving, which the time to first byte does not dilute. Every
    ``window`` seconds in which demand exceeded the count (``held_back``), that rate is compared
    with the best seen (a window not yet busy enough or with too little received to judge goes
    on, up to ``LONGEST`` windows: the first one begins with the first requests, a time to
    first byte before their bytes): at least ``hold`` of it, the link had room for the
    transfers added, so the count doubles; below it, the link (or this process) is full, so
    the count becomes what carries the bytes at the best rate per connection ever seen
    (``count * rate / peak``, plus ``headroom`` for transfers waiting for their first byte) and
    stays there for ``rest`` seconds, after which the best is measured afresh and growth is
    tried again. The count is of connections: a shard fetched as ranged parts takes one per
    part (``streaming.cache.walk``). A failed
    download halves the count (not below ``LOW``); so does a refusal by a throttling store (not
    below ``THROTTLED_LOW``: the node's request rate is then set by ``storage.pacing``, and the
    count only has to keep enough downloads waiting for their turns).

    Where the time to first byte is long, a transfer spends much of a shard's time waiting, so
    more of them are needed to keep the link busy (its bandwidth-delay product). The count
    therefore starts at ``START * wait / NEAR`` (capped at ``HIGH``, never below ``START``),
    ``wait`` being the lowest time to first byte the meter has seen: from the process's first
    responses (``index.json``) when the schedule begins, otherwise from its own first GETs.
    At ``NEAR`` (50 ms) or less (the same region) it starts at ``START``; at 100 ms
    (cross-region) at twice that. This is done once, before any judgement.
    """

    START, LOW, HIGH = 16, 2, 64
    NEAR = 0.05  # Time to first byte up to which the count starts at ``START`` (seconds).
    FLOOR = 8  # Lowest count a full link sets (a slower rate may be noise, not congestion).
    THROTTLED_LOW = 4
    LONGEST = 4  # Windows a window that cannot be judged yet goes on for.

    def __init__(self, fixed: int | None = None, window: float = 0.25, hold: float = 0.85,
                 headroom: float = 1.5, settle: float = 0.1, rest: float = 5.0,
                 meter: Meter = METER) -> None:
        self.fixed = fixed
        self.value = fixed or self.START
        self.window, self.hold, self.headroom = window, hold, headroom
        self.settle, self.rest, self.meter = settle, rest, meter
        self._since: float | None = None
        self._resume = 0.0  # No window begins before this time (after a change).
        self._frozen = 0.0  # No growth before this time (after the link was found full).
        self._busy = 0.0
        self._last = 0.0
        self._best = 0.0  # Best rate per connection since the last full link.
        self._peak = 0.0  # Best rate per connection ever: what one uncrowded transfer gets.
        self._mark = (0, 0.0)
        self._sized = fixed is not None  # Whether the start was sized by the first-byte wait.

    def _size_start(self, now: float) -> None:
        """Raise the count once the meter knows the time to first byte (see the class).

        A meter that does not measure it (``first_byte_wait`` missing or None) leaves it as is.
        """
        first_byte_wait = getattr(self.meter, 'first_byte_wait', None)
        wait = first_byte_wait() if first_byte_wait is not None else None
        if wait is None:
            return
        self._sized = True
        start = min(self.HIGH, int(self.START * wait / self.NEAR + 0.5))
        if start <= self.value:
            return
        if self._since is None:  # No window begun: the first one judges the new count.
            self.value = start
        else:  # A window begun with fewer transfers would judge the wrong count.
            self._change(now, start)

    def failed(self, now: float | None = None, low: int | None = None) -> None:
        """A download failed: halve the count (not below ``low``), grow nothing for a while."""
        if self.fixed is None:
            self.value = max(self.LOW if low is None else low, self.value // 2)
            self._sized = True  # Not raised after a failure.
            self._frozen = (time.monotonic() if now is None else now) + self.rest
            self._since = None

    def throttled(self, now: float | None = None) -> None:
        """The store refused requests (the pacer now sets the rate): fewer downloads queued."""
        self.failed(now, min(self.value, self.THROTTLED_LOW))

    def update(self, now: float, held_back: bool) -> None:
        """Called as the scheduler loops; ``held_back``: downloads waited for this count."""
        if self.fixed is not None:
            return
        if not self._sized:
            self._size_start(now)
        if self._since is None:
            if now >= self._resume:
                received, area, _ = self.meter.reading()
                self._since, self._last, self._busy, self._mark = now, now, 0.0, (received,
                                                                                   area)
            return
        if held_back:
            self._busy += now - self._last
        self._last = now
        elapsed = now - self._since
        if elapsed < self.window:
            return
        received, area, _ = self.meter.reading()
        nbytes, seconds = received - self._mark[0], area - self._mark[1]
        if self._busy < 0.5 * elapsed or seconds < elapsed or nbytes <= 0:
            # Not held back by the count, or too little received to judge: the window goes on
            # (the first bytes come a time to first byte after the first requests), up to
            # ``LONGEST`` windows.
            if elapsed >= self.LONGEST * self.window:
                self._since, self._busy, self._mark = now, 0.0, (received, area)
            return
        self._since, self._busy, self._mark = now, 0.0, (received, area)
        rate = nbytes / seconds
        if self._frozen and now >= self._frozen:
            self._frozen, self._best = 0.0, 0.0  # Measure the best afresh and try growing.
        if rate >= self.hold * self._best:
            self._best = max(self._best, rate)
            self._peak = max(self._peak, rate)
            if not self._frozen:
                self._change(now, min(self.HIGH, self.value * 2))
        elif not self._frozen:
            full = int(self.value * rate / self._peak * self.headroom + 0.5)
            self._change(now, max(min(self.FLOOR, self.value), min(self.value, full)))
            self._frozen = now + self.rest

    def _change(self, now: float, value: int) -> None:
        if value != self.value:
            self.value = value
            self._since, self._resume = None, now + self.settle
