"""A shuffle, a partition and a batching method of the reference's shapes, for both libraries.

Imported by our tests and by the reference's driver (``ref_order.py``, run with the reference's
python): each is a plain function of the reference's signature, using only numpy and the
reference's public ``streaming.base`` functions, so the same code runs against either library.
``install()`` and ``install_batching()`` put them in the reference's runtime tables, the way a
user of the reference does.
"""

from __future__ import annotations

import numpy as np


def shard_runs(shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
               block_size: int) -> np.ndarray:
    """Shards in a seeded random order, each read back to front; the block size rotates it."""
    sizes = np.asarray(shard_sizes, np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    order = np.random.default_rng(seed * 1000 + epoch).permutation(len(sizes))
    parts = [starts[i] + np.arange(sizes[i] - 1, -1, -1, dtype=np.int64) for i in order]
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return np.roll(ids, block_size % max(len(ids), 1))


def reversed_batches(num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                     ranks_per_node: int, workers_per_rank: int, batch_size: int,
                     drop_first: int = 0, initial_physical_nodes: int | None = None) -> np.ndarray:
    """``orig``'s partition with every batch's slots reversed."""
    from streaming.base.partition import get_partitions_orig
    ids = get_partitions_orig(num_samples, num_canonical_nodes, num_physical_nodes,
                              ranks_per_node, workers_per_rank, batch_size, drop_first)
    return np.ascontiguousarray(ids[..., ::-1])


def odd_first(dataset, world, epoch: int, sample_in_epoch: int) -> np.ndarray:
    """``random`` batching, then each worker's odd-numbered batches before its even ones."""
    from streaming.base.batching import generate_work_random_batching
    ids = generate_work_random_batching(dataset, world, epoch, sample_in_epoch)
    return np.ascontiguousarray(np.concatenate([ids[:, :, :, 1::2], ids[:, :, :, 0::2]], axis=3))


def install() -> None:
    """Register the shuffle and the partition as ``mine`` in the reference's tables."""
    from streaming.base import partition, shuffle
    shuffle.algos['mine'] = shard_runs
    partition.algos['mine'] = reversed_batches


def install_batching() -> None:
    """Put ``odd_first`` in place of ``random`` batching (the reference's dataset accepts only
    its four method names, so a method is changed by replacing one)."""
    from streaming.base import batching
    batching.batching_methods['random'] = odd_first
