"""The epoch as the node's download schedule walks it: first uses ahead, last uses behind.

``streaming.cache.prefetch`` (the real schedule) and ``streaming.plan.simulate`` (its replay in
simulated time) walk an epoch alike: they start shards in the order the node first needs them,
and, under a ``cache_limit``, mark each shard once every reader is past its last use, so that
eviction takes it before any shard still needed. The first and last uses are the order
package's (``streaming.order.first_use``).
"""

from __future__ import annotations

from collections import deque
from typing import Iterator

import numpy as np

from streaming.cache.shard_cache import REMOTE
from streaming.order.first_use import iter_first_uses, last_uses

__all__ = ['EpochWalk']


class EpochWalk:
    """One plan's shards: ``peek``/``take`` in first-use order, ``passed`` by last use.

    ``order`` is the node's ``(ranks, workers, batches, batch)`` sample ids; ``track_last``
    computes the last uses (only eviction needs them).
    """

    def __init__(self, order: np.ndarray, shard_starts: np.ndarray, num_shards: int,
                 track_last: bool) -> None:
        self._firsts = iter_first_uses(order, shard_starts, num_shards)
        self._queue: deque[tuple[int, int]] = deque()
        self.walked = False  # Every shard's first use has been peeked.
        self._last: np.ndarray | None = None
        self._by_last = np.zeros(0, np.int64)
        self._cursor = 0
        if track_last:
            self._last = last_uses(order, shard_starts, num_shards)
            used = np.flatnonzero(self._last >= 0)
            self._by_last = used[np.argsort(self._last[used], kind='stable')]

    def peek(self) -> tuple[int, int] | None:
        """The next ``(shard, first use)`` not taken yet, or None once all are."""
        while not self._queue:
            try:
                shards, times = next(self._firsts)
            except StopIteration:
                self.walked = True
                return None
            self._queue.extend(zip(shards.tolist(), times.tolist()))
        return self._queue[0]

    def next_remote(self, states: np.ndarray, horizon: int | None) -> tuple[int, int] | None:
        """The next ``(shard, first use)`` still remote, first used before ``horizon`` if any.

        Shards local or being prepared by someone (``states``) are taken on the way.
        """
        while (item := self.peek()) is not None and states[item[0]] != REMOTE:
            self.take()
        if item is None or (horizon is not None and item[1] >= horizon):
            return None
        return item

    def take(self) -> None:
        """Done with the shard ``peek`` gave (started, or nothing to do for it)."""
        self._queue.popleft()

    def passed(self, now: int) -> Iterator[int]:
        """Shards whose last use is before ``now``, each once, in the order of their last use."""
        while self._cursor < len(self._by_last):
            shard = int(self._by_last[self._cursor])
            if self._last[shard] >= now:  # type: ignore[index]
                return
            self._cursor += 1
            yield shard

    @property
    def finished(self) -> bool:
        """Every shard taken and every last use passed."""
        return self.walked and not self._queue and self._cursor >= len(self._by_last)
