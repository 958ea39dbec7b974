"""Per-worker iteration: the node's shared epoch order, and a loop that reports its progress."""

from __future__ import annotations

import glob
import hashlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from streaming.coord import SharedDir
from streaming.fileio import atomic_open

if TYPE_CHECKING:
    from streaming.cache.prefetch import Progress

__all__ = ['shared_epoch_order', 'iterate_samples', 'shard_chunks']


def shared_epoch_order(shared: SharedDir, params: dict[str, Any],
                       compute: Callable[[], np.ndarray], name: str = 'order') -> np.ndarray:
    """The epoch's sample order, computed once per node and memory-mapped by everyone else.

    The first process to ask computes it and publishes it as a file named by a hash of
    ``params``; the others block on a lock meanwhile, then map that file read-only. ``name``
    names the lock and the files: a registered batching method's order (``work``) is computed
    under a lock of its own, since it may ask for a built-in order (under ``order``) inside.
    """
    key = hashlib.sha1(repr(sorted(params.items())).encode()).hexdigest()[:20]
    path = shared.file_path(f'{name}-{key}.npy')
    if not os.path.exists(path):
        with shared.lock(name):
            if not os.path.exists(path):
                order = compute()
                with atomic_open(path) as file:
                    np.save(file, order)
                for old in glob.glob(shared.file_path(f'{name}-*.npy')):
                    if old != path:  # Maps of old orders stay valid after the unlink.
                        os.remove(old)
    return np.load(path, mmap_mode='r')


CHUNK = 1 << 14  # Samples mapped to shards at a time: bounded memory, instant first sample.


def shard_chunks(sample_ids: np.ndarray, shard_starts: np.ndarray,
                 begin: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(position, shard ids, ids within the shard) for each chunk of ``sample_ids``.

    ``sample_ids`` may hold -1 padding, which is dropped.
    """
    for start in range(begin, len(sample_ids), CHUNK):
        ids = np.asarray(sample_ids[start:start + CHUNK])
        ids = ids[ids >= 0]
        shards = np.searchsorted(shard_starts, ids, 'right') - 1
        yield start, shards, ids - shard_starts[shards]


def iterate_samples(sample_ids: np.ndarray, shard_starts: np.ndarray,
                    read: Callable[[int, int], Any] | None, get: Callable[[int], Any],
                    prefetcher: Progress | None) -> Iterator[Any]:
    """Yield each sample: ``read(shard, index)`` on the fast path, else ``get(sample_id)``."""
    try:
        for start, shards, indices in shard_chunks(sample_ids, shard_starts):
            if read is not None and prefetcher is None:
                yield from map(read, shards.tolist(), indices.tolist())
                continue
            ids = (shard_starts[shards] + indices).tolist()
            for offset, (shard, index) in enumerate(zip(shards.tolist(), indices.tolist())):
                if prefetcher is not None:
                    prefetcher.advance(start + offset)
                yield read(shard, index) if read is not None else get(ids[offset])
    finally:
        if prefetcher is not None:
            prefetcher.stop()
