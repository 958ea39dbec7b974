"""Validation of StreamingDataset's iteration options, each error naming its parameter."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from streaming.util import bytes_to_int, number_abbrev_to_int, parse_quantity

__all__ = ['DatasetOptions']

_CHOICES = {
    'sampling_method': ('balanced', 'fixed'),
    'partition_algo': ('orig', 'relaxed'),
    'shuffle_algo': ('naive', 'py1b', 'py1br', 'py1e', 'py1s', 'py2s'),
    'batching_method': ('random', 'stratified', 'per_stream', 'device_per_stream'),
}
_BLOCK_SHUFFLES = ('py1b', 'py1br', 'py1e')


def _positive(name: str, value: Any, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)
                              or value < low):
        raise ValueError(f'{name} must be an integer >= {low}, got {value!r}.')


@dataclass
class DatasetOptions:
    """How a dataset lays out and caches its epochs."""

    epoch_size: int | None
    predownload: int
    cache_limit: int | None
    sampling_method: str
    sampling_granularity: int
    partition_algo: str
    num_canonical_nodes: int | None
    batch_size: int | None
    shuffle: bool
    shuffle_algo: str
    shuffle_seed: int
    shuffle_block_size: int | None
    batching_method: str
    replication: int | None

    @classmethod
    def validate(cls, **kwargs: Any) -> DatasetOptions:
        for name, allowed in _CHOICES.items():
            if kwargs[name] not in allowed:
                raise ValueError(f'{name} must be one of {list(allowed)}, got {kwargs[name]!r}.')
        for name in ('sampling_granularity', 'num_canonical_nodes', 'batch_size',
                     'shuffle_block_size', 'replication'):
            _positive(name, kwargs[name])
        _positive('shuffle_seed', kwargs['shuffle_seed'], allow_zero=True)
        _positive('predownload', kwargs['predownload'], allow_zero=True)
        epoch_size, cache_limit = kwargs['epoch_size'], kwargs['cache_limit']
        if epoch_size is not None:
            epoch_size = parse_quantity('epoch_size', epoch_size, number_abbrev_to_int)
        if cache_limit is not None:
            cache_limit = parse_quantity('cache_limit', cache_limit, bytes_to_int, minimum=1)
        batch_size = kwargs['batch_size']
        predownload = kwargs['predownload']
        if predownload is None:
            predownload = 8 * batch_size if batch_size else 64
        elif batch_size and predownload < batch_size:
            warnings.warn(f'predownload={predownload} is below batch_size={batch_size}: batches '
                          f'will wait on downloads.', stacklevel=3)
        return cls(**{**kwargs, 'epoch_size': epoch_size, 'cache_limit': cache_limit,
                      'predownload': predownload, 'shuffle': bool(kwargs['shuffle'])})

    def block_size_cap(self, samples_per_shard: np.ndarray,
                       shard_bytes: Sequence[int]) -> int | None:
        """The largest shuffle block whose shards all fit in half of ``cache_limit``.

        A block shuffle mixes about ``block_size`` consecutive samples, so the shards of one block
        must be local at once. If they cannot fit in half the cache (the other half being room
        for prefetching and other workers), shards would be evicted and downloaded again many
        times per epoch. None when no cap applies.
        """
        if self.cache_limit is None or not self.shuffle or self.shuffle_algo not in \
                _BLOCK_SHUFFLES or not len(samples_per_shard):
            return None
        mean_bytes = max(float(np.mean(shard_bytes)), 1.0)
        shards_fit = max(int(self.cache_limit // 2 // mean_bytes), 1)
        return max(int(shards_fit * float(np.mean(samples_per_shard))), 1)

    def block_size(self, num_canonical_nodes: int, cap: int | None) -> int:
        """The shuffle block size in effect: the given or default one, within ``cap``."""
        block = self.shuffle_block_size or max(4_000_000 // num_canonical_nodes, 1 << 18)
        return block if cap is None else min(block, cap)
