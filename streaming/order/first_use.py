"""When a node first needs each shard of an epoch: the order its downloads should follow.

An epoch order for one node is a ``(ranks, workers, batches, batch)`` array of sample ids (-1:
padding). A DataLoader takes batch ``b`` of worker ``w`` as the rank's global batch
``b * workers + w``, and every rank of the node advances at the same pace, so the sample at
``(r, w, b, s)`` is read at the rank's *time* ``(b * workers + w) * batch + s`` (samples the rank
has read before it). A shard's first use is the least time of any of its samples. These times
do not depend on the number of workers: the dealing hands global batch ``g`` to worker
``g % workers``, whatever that number is.

Pure numpy functions of arrays; the walk is chunked, so an epoch of any length costs bounded
memory and the first shards are known at once.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

__all__ = ['first_uses', 'iter_first_uses', 'last_uses', 'sample_time']


def sample_time(position: int, worker: int, workers: int, batch_size: int) -> int:
    """The rank's time of position ``position`` (padding included) of worker ``worker``'s order."""
    batch, slot = divmod(position, batch_size)
    return (batch * workers + worker) * batch_size + slot


def first_uses(ids: np.ndarray, times: np.ndarray, shard_starts: np.ndarray,
               seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shards first used among ``ids`` (read at ``times``) and not in ``seen``.

    Returns (shards, their first-use times), ordered by time; marks them in ``seen`` (a bool
    array over shards). ``ids`` may hold -1 padding.
    """
    keep = ids >= 0
    ids, times = ids[keep], times[keep]
    shards = np.searchsorted(shard_starts, ids, 'right') - 1
    order = np.argsort(times, kind='stable')
    shards, times = shards[order], times[order]
    unique, first = np.unique(shards, return_index=True)
    new = ~seen[unique]
    unique, first = unique[new], first[new]
    by_time = np.argsort(first, kind='stable')
    seen[unique] = True
    return unique[by_time], times[first[by_time]]


def _chunks(order: np.ndarray, begin_batch: int, chunk: int
            ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(sample ids, their times) of ``order`` in reading order, a chunk of batches at a time."""
    ranks, workers, batches, batch = order.shape
    step = max(1, chunk // max(1, ranks * workers * batch))
    for begin in range(begin_batch, batches, step):
        end = min(begin + step, batches)
        ids = np.asarray(order[:, :, begin:end]).transpose(2, 1, 3, 0)  # (b, W, S, R)
        b, w, s = np.meshgrid(np.arange(begin, end), np.arange(workers), np.arange(batch),
                              indexing='ij')
        times = np.broadcast_to(((b * workers + w) * batch + s)[..., None], ids.shape)
        yield ids.reshape(-1), times.reshape(-1)


def last_uses(order: np.ndarray, shard_starts: np.ndarray, num_shards: int,
              chunk: int = 1 << 16) -> np.ndarray:
    """Each shard's last use by the node in ``order`` (its time; -1: not used)."""
    last = np.full(num_shards, -1, np.int64)
    for ids, times in _chunks(order, 0, chunk):
        keep = ids >= 0
        shards = np.searchsorted(shard_starts, ids[keep], 'right') - 1
        np.maximum.at(last, shards, times[keep])
    return last


def iter_first_uses(order: np.ndarray, shard_starts: np.ndarray, num_shards: int,
                    from_time: int = 0, chunk: int = 1 << 16
                    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(shards, first-use times) of a node's epoch ``order``, chunk after chunk, in time order.

    ``order`` is ``(ranks, workers, batches, batch)``; only samples read at ``from_time`` or
    later count. ``shard_starts`` holds each shard's first sample id (and the total at the end).
    """
    ranks, workers, batches, batch = order.shape
    seen = np.zeros(num_shards, bool)
    first_batch = max(0, from_time // (workers * batch) - 1) if workers * batch else 0
    for ids, times in _chunks(order, first_batch, chunk):
        later = times >= from_time
        shards, first = first_uses(ids[later], times[later], shard_starts, seen)
        if len(shards):
            yield shards, first
        if seen.all():
            return
