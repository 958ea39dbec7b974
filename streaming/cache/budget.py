"""How ``cache_limit``'s bytes are shared: the block-size cap, and the node's downloads' budget.

Pure arithmetic on sizes, so that ``streaming cost`` and ``streaming plan`` (which have no cache)
reckon as a dataset's ``ShardCache`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

__all__ = ['AUTO_AHEAD_BYTES', 'DownloadBudget', 'samples_that_fit', 'share_of']

AUTO_AHEAD_BYTES = 4 << 30  # How far ahead the node fetches without a cache_limit.


def samples_that_fit(limit: int | None, max_sizes: np.ndarray,
                     samples_per_shard: np.ndarray) -> int | None:
    """``ShardCache.samples_that_fit`` for shards of peak sizes ``max_sizes``.

    Also used by ``streaming cost`` and ``streaming plan``, which must cap the block size as a
    dataset does.
    """
    if limit is None or not len(samples_per_shard):
        return None
    mean_bytes = max(float(np.mean(max_sizes)), 1.0)
    shards_fit = max(int(limit // 4 // mean_bytes), 1)
    return max(int(shards_fit * float(np.mean(samples_per_shard))), 1)


def share_of(room: int, largest: int) -> int:
    """What the node's downloads may take of ``room`` bytes under ``cache_limit``.

    Three quarters, as long as that leaves room for two of the largest shards (``largest``
    bytes each: two readers each waiting for one); never less than half, the share it had
    before. Under a small limit, three quarters keeps more transfers in flight and fetches fewer
    shards twice (measured through the link emulator: docs/benchmarks.md, "Remote through an
    emulated network link").
    """
    return max(room // 2, min(room * 3 // 4, room - 2 * largest))


@dataclass(frozen=True)
class DownloadBudget:
    """The bytes the node's download schedule may use of the cache.

    ``ahead``: shards fetched before any reader needs them, at most (``share_of`` the limit, or
    ``AUTO_AHEAD_BYTES`` without one; never less than the largest shard). ``reservable``: what
    downloads in flight may reserve at once (``share_of`` the room the streams' indexes leave
    under the limit), so that readers can always make room for the shards they wait for; None
    without a limit.
    """

    ahead: int
    reservable: int | None

    @classmethod
    def for_limit(cls, limit: int | None, index_bytes: int, largest: int) -> DownloadBudget:
        if limit is None:
            return cls(max(AUTO_AHEAD_BYTES, largest), None)
        return cls(max(share_of(limit, largest), largest), share_of(limit - index_bytes, largest))

    def admits(self, size: float, fetched_ahead: float | None, in_flight: Iterable[float],
               fits_ahead: Callable[[float], bool]) -> bool:
        """Whether a download of ``size`` bytes may start now.

        ``fetched_ahead``: the bytes of shards fetched ahead so far, if this one is fetched ahead
        too (None: a reader needs it now); it must keep within ``ahead`` and fit the cache
        (``fits_ahead``, ``ShardCache.room_for_ahead``). ``in_flight``: the bytes each download
        in flight reserves; beside any, this one must keep within ``reservable``.
        """
        if fetched_ahead is not None and (fetched_ahead + size > self.ahead or
                                          not fits_ahead(size)):
            return False
        reserved = list(in_flight)
        return not reserved or self.reservable is None or sum(reserved) + size <= self.reservable
