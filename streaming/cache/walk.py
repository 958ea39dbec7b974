"""The epoch as the node's download schedule walks it: first uses ahead, last uses behind.

``streaming.cache.prefetch`` (the real schedule) and ``streaming.plan.simulate`` (its replay in
simulated time) walk an epoch alike: they start shards in the order the node first needs them,
and, under a ``cache_limit``, mark each shard once every reader is past its last use, so that
eviction takes it before any shard still needed. The first and last uses are the order
package's (``streaming.order.first_use``).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterator

import numpy as np

from streaming.cache.shard_cache import REMOTE
from streaming.order.first_use import iter_first_uses, last_uses

__all__ = ['EpochWalk', 'MAX_PARTS', 'tail_parts']

MAX_PARTS = 8


def tail_parts(free: int, unstarted: int, limit: int) -> int:
    """Ranged parts to fetch the next shard in: 1, except at the end of the epoch.

    While at least ``limit`` shards are left to start, each is one GET. Past that, the last
    ones are split so that they still use ``limit`` connections (at most ``MAX_PARTS`` each):
    one capped connection per shard would leave the link idle while the last few trickle in.
    """
    if unstarted >= limit or free <= 0:
        return 1
    return max(1, min(MAX_PARTS, -(-limit // max(unstarted, 1))))


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
        self._past = -1  # The latest ``now`` given to ``passed``.
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

    def next_remote(self, states: np.ndarray, horizon: int | None,
                    now: int = 0) -> tuple[int, int] | None:
        """The next ``(shard, first use)`` still remote, first used before ``horizon`` if any.

        Shards local or being prepared by someone (``states``) are taken on the way, and so
        are shards whose last use is before ``now`` (with last uses tracked): a schedule behind
        its readers would otherwise fetch a shard that they fetched, read and let go of,
        again and for nobody.
        """
        last = self._last
        while (item := self.peek()) is not None and (
                states[item[0]] != REMOTE or (last is not None and last[item[0]] < now)):
            self.take()
        if item is None or (horizon is not None and item[1] >= horizon):
            return None
        return item

    def admit(self, states: np.ndarray, now: int, horizon: int | None, in_flight: dict[Any, Any],
              others: int, limit: int, ahead: deque[tuple[int, float]],
              size_of: Callable[[int], float], budget: Any, room_for: Callable[[float], bool],
              connections: int, split_tail: bool = True) -> Iterator[tuple[int, int, float, int]]:
        """The shards to start now: ``(shard, first use, size, ranged parts)``, in first-use order.

        Stops at ``limit`` connections (``connections`` already used by ``in_flight``, which
        the caller adds each shard to before asking for the next, plus ``others``; a shard's
        ranged parts count one each, so a split tail goes past the count by less than
        ``MAX_PARTS``), at
        ``horizon`` and when ``budget.admits`` says the cache has no room
        (``streaming.cache.budget.DownloadBudget``). ``in_flight``'s values end with the bytes
        each transfer reserved. ``ahead`` holds ``(first use, size)`` of the
        shards fetched before their use; those used by ``now`` leave it here.
        """
        while ahead and ahead[0][0] <= now:
            ahead.popleft()
        ahead_bytes = sum(size for _, size in ahead)
        unstarted = -1  # Shards nobody fetches yet, counted when first needed.
        used = connections + others
        while used < limit:
            item = self.next_remote(states, horizon, now)
            if item is None:
                return
            shard, first = item
            size = size_of(shard)
            if not budget.admits(size, ahead_bytes if first > now else None,
                                 [value[-1] for value in in_flight.values()], room_for):
                return
            self.take()
            if unstarted < 0:
                unstarted = int(np.count_nonzero(states == REMOTE))
            parts = tail_parts(limit - used, unstarted, limit) if split_tail else 1
            used += parts
            unstarted -= 1
            yield shard, first, size, parts
            if first > now:
                ahead.append((first, size))
                ahead_bytes += size

    def take(self) -> None:
        """Done with the shard ``peek`` gave (started, or nothing to do for it)."""
        self._queue.popleft()

    def passed(self, now: int) -> Iterator[int]:
        """Shards whose last use is before ``now``, each once, in the order of their last use."""
        self._past = max(self._past, now)
        while self._cursor < len(self._by_last):
            shard = int(self._by_last[self._cursor])
            if self._last[shard] >= now:  # type: ignore[index]
                return
            self._cursor += 1
            yield shard

    def is_past(self, shard: int) -> bool:
        """Whether ``passed`` has reached ``shard``'s last use (False without last uses).

        A download started before may end after: its shard is then marked passed, not ahead.
        """
        return self._last is not None and int(self._last[shard]) < self._past

    @property
    def finished(self) -> bool:
        """Every shard taken and every last use passed."""
        return self.walked and not self._queue and self._cursor >= len(self._by_last)
