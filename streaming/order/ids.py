"""The epoch's sample ids: each shard's draw, shuffled (the expensive half), then dealt.

The epoch's big ids (see ``resample``) are dealt to devices as positions (``partition``); when
shuffling, position ``p`` reads big id ``shuffle[p]`` (``shuffles``); big ids then map to sample
ids. This is the reference's ``random`` batching, and, stream by stream, what its other
batching methods start from (``batching``).

It is split in two so that the expensive half can be kept and reused: ``epoch_sample_ids``
(the sample id at each position of the epoch: depends on the data, seed, epoch and shuffle,
not on the topology or on where the epoch resumes) and ``deal_ids`` / ``dealt_array`` (those
ids dealt to nodes, ranks, workers and batches, a chunk at a time).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from streaming.order.partition import ArrayDealing, Dealing, deal_positions
from streaming.order.resample import Resampled, resample
from streaming.order.shuffles import shuffle_positions, shuffle_steps
from streaming.order.shuffles.rows import FinalParts

__all__ = ['deal_ids', 'dealt_array', 'dealt_ids', 'epoch_id_steps', 'epoch_sample_ids',
           'final_ranges', 'newly_final', 'take_ids']

_CHUNK = 1 << 22  # Elements gathered at a time.


def epoch_sample_ids(**inputs: Any) -> np.ndarray:
    """The sample id at each position of the epoch (int32 when the ids fit, else int64).

    Takes the keyword arguments of ``epoch_id_steps``, and runs it to the end.
    """
    steps = epoch_id_steps(**inputs)
    ids = next(steps)
    for _ in steps:
        pass
    return ids  # type: ignore[return-value]


def epoch_id_steps(*, shard_sizes: np.ndarray, shard_streams: np.ndarray,
                   stream_choose: np.ndarray, epoch: int, seed: int, shuffle: bool,
                   shuffle_algo: str, block_size: int, num_canonical_nodes: int,
                   sampling_method: str, sampling_granularity: int,
                   first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """``epoch_sample_ids`` a part at a time.

    Yields the array, then what is final (``rows.FinalParts``), as parts become final (the
    last yield is all of them). With ``py1e``, the first positions are final once a window of
    the first row is sorted, long before the rest of the epoch; the row holding
    ``first_position`` (not an input of the ids: only the order of the work) comes first.
    """
    drawn = resample(shard_sizes, shard_streams, stream_choose, seed=seed, epoch=epoch,
                     sampling_method=sampling_method,
                     sampling_granularity=sampling_granularity, shuffle=shuffle)
    small = drawn.small
    if not shuffle:
        if small is None:
            dtype = np.int32 if drawn.num_samples < np.iinfo(np.int32).max else np.int64
            small = np.arange(drawn.num_samples, dtype=dtype)
        yield small
        yield len(small)
        return
    steps = shuffle_steps(shuffle_algo, drawn.unit_sizes, num_canonical_nodes, seed, epoch,
                          block_size, first_position)
    ids: np.ndarray = next(steps)  # type: ignore[assignment]
    if small is not None and small.dtype != ids.dtype:  # Sample ids may need more bits.
        wide = np.empty(len(ids), small.dtype)
        yield wide
        for _ in steps:
            pass
        for start in range(0, len(ids), _CHUNK):
            part = wide[start:start + _CHUNK]
            np.take(small, ids[start:start + _CHUNK], out=part, mode='clip')
        yield len(ids)
        return
    yield ids
    done: FinalParts = 0
    for final in steps:
        if small is not None:
            for begin, stop in newly_final(done, final):  # In place, as parts become final.
                for start in range(begin, stop, _CHUNK):
                    part = ids[start:min(start + _CHUNK, stop)]
                    np.take(small, part, out=part, mode='clip')
        done = final
        yield done


def final_ranges(final: FinalParts) -> list[tuple[int, int]]:
    """The non-empty position ranges ``[begin, stop)`` a ``FinalParts`` says are final."""
    head, begin, stop = (int(final), 0, 0) if isinstance(final, (int, np.integer)) else final
    return [(x, y) for x, y in ((0, int(head)), (int(begin), int(stop))) if y > x]


def newly_final(before: FinalParts, after: FinalParts) -> list[tuple[int, int]]:
    """The ranges of positions final in ``after`` but not in ``before``."""
    out = []
    for a, b in final_ranges(after):
        pieces = [(a, b)]
        for c, d in final_ranges(before):
            pieces = [piece for x, y in pieces
                      for piece in (((x, y),) if d <= x or c >= y else
                                    ((x, min(y, c)), (max(x, d), y)))
                      if piece[1] > piece[0]]
        out += pieces
    return out


def deal_ids(ids: np.ndarray, dealing: Dealing | ArrayDealing,
             chunk: int = _CHUNK) -> Iterator[tuple[tuple[int, int, int], int, np.ndarray]]:
    """``((node, rank, worker), first slot, sample ids)`` in the order of the dealt array.

    ``ids`` may be any array-like supporting fancy indexing (a memory map, say); -1 marks
    slots with no sample. Concatenated, the chunks are ``dealt.ravel()`` for the whole array of
    shape ``dealing.shape``.
    """
    per_worker = dealing.slots_per_worker
    nodes, ranks, workers = dealing.shape[:3]
    for node in range(nodes):
        for rank in range(ranks):
            for worker in range(workers):
                for start in range(0, per_worker, chunk):
                    positions = dealing.positions(node, rank, worker, start,
                                                  min(start + chunk, per_worker))
                    yield (node, rank, worker), start, take_ids(ids, positions)


def take_ids(ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``ids[positions]`` (as int64), -1 where ``positions`` is -1."""
    if not len(positions):
        return positions
    if positions[-1] >= 0 and positions.min() >= 0:
        return np.asarray(ids[positions], np.int64)
    found = positions >= 0
    out = np.full(len(positions), -1, np.int64)
    out[found] = ids[positions[found]]
    return out


def dealt_ids(drawn: Resampled, *, shuffle: bool, shuffle_algo: str, block_size: int,
              num_canonical_nodes: int, partition_algo: str, num_physical_nodes: int,
              ranks_per_node: int, workers_per_rank: int, batch_size: int, drop_first: int,
              initial_physical_nodes: int | None, seed: int, epoch: int) -> np.ndarray:
    """``drawn``'s positions dealt to devices, shuffled, as sample ids (-1 for none)."""
    order = deal_positions(partition_algo, drawn.num_samples, num_canonical_nodes,
                           num_physical_nodes, ranks_per_node, workers_per_rank, batch_size,
                           drop_first, initial_physical_nodes)
    if shuffle:
        permutation = shuffle_positions(shuffle_algo, drawn.unit_sizes, num_canonical_nodes,
                                        seed, epoch, block_size)
        valid = order >= 0
        order[valid] = permutation[order[valid]]
    return drawn.to_small(order)


def dealt_array(ids: np.ndarray, dealing: Dealing | ArrayDealing) -> np.ndarray:
    """The whole int64 array (``dealing.shape``) of the sample ids each slot reads.

    Up to ``_CHUNK`` slots, the positions are dealt whole (``dealing.full``, a few array
    operations for a small world) and replaced by their ids in place; a bigger array is filled
    worker by worker, a chunk at a time (``deal_ids``).
    """
    if int(np.prod(dealing.shape)) > _CHUNK:
        out = np.empty(dealing.shape, np.int64)
        by_worker = out.reshape(dealing.shape[:3] + (-1,))
        for (node, rank, worker), start, part in deal_ids(ids, dealing):
            by_worker[node, rank, worker, start:start + len(part)] = part
        return out
    out = dealing.full()
    if isinstance(dealing, ArrayDealing):
        out = out.copy()  # The registered partition's own array stays as it returned it.
    flat = out.reshape(-1)
    for start in range(0, len(flat), _CHUNK):
        part = flat[start:start + _CHUNK]
        part[...] = take_ids(ids, part)
    return out
