"""When a node first needs each shard of an epoch: the order its downloads should follow.

An epoch order for one node is a ``(ranks, workers, batches, batch)`` array of sample ids (-1:
padding). A DataLoader takes batch ``b`` of worker ``w`` as the rank's global batch
``b * workers + w``, and every rank of the node advances at the same pace, so the sample at
``(r, w, b, s)`` is read at the rank's *time* ``(b * workers + w) * batch + s`` (samples the rank
has read before it). A shard's first use is the least time of any of its samples. These times
do not depend on the number of workers: the dealing hands global batch ``g`` to worker
``g % workers``, whatever that number is.

Under a cache limit a shard read, evicted, and needed again must be fetched again, so
``iter_uses`` also yields each later *use* of a shard: a sample read more than ``gap`` samples
of time after the shard's previous sample (a shard in steady use stays cached).

Pure numpy functions of arrays; the walk is chunked, so an epoch of any length costs bounded
memory and the first shards are known at once.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

__all__ = ['first_uses', 'iter_first_uses', 'iter_uses', 'last_uses', 'sample_time', 'uses']


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


def uses(ids: np.ndarray, times: np.ndarray, shard_starts: np.ndarray, previous: np.ndarray,
         gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The uses that begin among ``ids`` (read at ``times``), ordered by time.

    A use begins at a shard's first sample, or at one read more than ``gap`` after the shard's
    previous sample. Returns (shards, times, the time each shard was read last before: -1 for
    a first use). ``previous`` holds each shard's last time read before these (-1: never) and
    is updated; ``ids`` may hold -1 padding. Times must not precede those already seen.
    """
    keep = ids >= 0
    ids, times = ids[keep], times[keep]
    shards = np.searchsorted(shard_starts, ids, 'right') - 1
    order = np.lexsort((times, shards))
    shards, times = shards[order], times[order]
    if not len(shards):
        return shards, times, times.copy()
    head = np.ones(len(shards), bool)  # The first of its shard in this chunk.
    head[1:] = shards[1:] != shards[:-1]
    before = np.empty_like(times)
    before[1:] = times[:-1]
    before[head] = previous[shards[head]]
    begins = (before < 0) | (times - before > gap)
    tail = np.append(head[1:], True)  # The last of its shard in this chunk.
    previous[shards[tail]] = times[tail]
    shards, times, before = shards[begins], times[begins], before[begins]
    by_time = np.lexsort((order[begins], times))  # Equal times: in reading order (by rank).
    return shards[by_time], times[by_time], before[by_time]


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


def iter_uses(order: np.ndarray, shard_starts: np.ndarray, num_shards: int, gap: int,
              from_time: int = 0, chunk: int = 1 << 16
              ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(shards, times, previous reads) of the uses that begin in ``order`` (see ``uses``).

    As ``iter_first_uses``, plus each shard again where it is read after more than ``gap``
    samples of time without it (it may have been evicted under a cache limit meanwhile).
    """
    ranks, workers, batches, batch = order.shape
    previous = np.full(num_shards, -1, np.int64)
    first_batch = max(0, from_time // (workers * batch) - 1) if workers * batch else 0
    for ids, times in _chunks(order, first_batch, chunk):
        later = times >= from_time
        begun = uses(ids[later], times[later], shard_starts, previous, gap)
        if len(begun[0]):
            yield begun
