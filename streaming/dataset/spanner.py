"""A global sample index -> (shard, index in shard): the reference's ``Spanner``."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ['Spanner']


class Spanner:
    """Maps a sample index over all shards to its shard and its index within that shard.

    ``span_size`` is accepted for compatibility; lookups are a binary search over the shards'
    first sample indices, O(log shards) for any shard sizes.
    """

    def __init__(self, shard_sizes: NDArray[np.int64], span_size: int = 1 << 10) -> None:
        self.shard_sizes = np.asarray(shard_sizes, np.int64)
        self.span_size = span_size
        self.num_samples = int(self.shard_sizes.sum())
        self.shard_bounds = np.concatenate([[0], np.cumsum(self.shard_sizes)])

    def __getitem__(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.num_samples:
            raise IndexError(f'Sample index {index} out of range: expected 0 <= index < '
                             f'{self.num_samples}.')
        shard = int(np.searchsorted(self.shard_bounds, index, side='right')) - 1
        return shard, int(index - self.shard_bounds[shard])
