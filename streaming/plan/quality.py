"""How well an epoch is shuffled, from its order alone.

* ``entropy_bits``: the Shannon entropy (bits) of the differences between consecutive sample ids
  in the order a node reads them, the measure the reference's simulator reports: an unshuffled
  epoch has one difference (1) and scores 0; the more varied the jumps, the higher. It is also
  given for a uniformly random permutation of the same samples (``random_entropy_bits``) and as
  the ratio of the two (``entropy_score``, 1.0: as good as a full shuffle).
* ``distinct_shards_per_batch``: shards a global batch (every rank of every node, one step)
  draws from; few means batches are correlated by the order they were written in.
* ``samples_between_reads``: samples a node reads between two reads of the same shard (median),
  i.e. how spread out one shard's samples are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ['entropy_bits', 'shuffle_quality']

MAX_IDS = 1 << 20  # Longest stretch of an order scored (the measures are per-sample averages).


def entropy_bits(ids: np.ndarray) -> float:
    """Entropy of the consecutive differences of ``ids`` (bits); 0.0 for fewer than 2 ids."""
    if len(ids) < 2:
        return 0.0
    _, counts = np.unique(np.diff(ids.astype(np.int64)), return_counts=True)
    share = counts / counts.sum()
    return float(-(share * np.log2(share)).sum())


def _node_ids(node_order: np.ndarray) -> np.ndarray:
    """A node's ``(ranks, workers, batches, batch)`` order as read: step, rank, slot."""
    ranks, workers, batches, batch = node_order.shape
    ids = node_order.transpose(2, 1, 0, 3).reshape(-1)
    return ids[ids >= 0]


def shuffle_quality(orders: np.ndarray, shard_starts: np.ndarray) -> dict[str, Any]:
    """The measures above for an epoch's ``(nodes, ranks, workers, batches, batch)`` order."""
    ids = _node_ids(orders[0])[:MAX_IDS]
    entropy = entropy_bits(ids)
    shuffled = np.random.default_rng(0).permutation(ids)
    random_entropy = entropy_bits(shuffled)
    nodes, ranks, workers, batches, batch = orders.shape
    steps = orders.transpose(3, 2, 0, 1, 4).reshape(batches * workers, -1)
    steps = steps[: max(1, MAX_IDS // max(1, steps.shape[1]))]
    shards = np.where(steps >= 0, np.searchsorted(shard_starts, steps, 'right') - 1, -1)
    shards.sort(axis=1)
    distinct = ((np.diff(shards, axis=1) != 0) & (shards[:, 1:] >= 0)).sum(axis=1) + \
        (shards[:, 0] >= 0)
    distinct = distinct[(steps >= 0).any(axis=1)]
    read_shards = np.searchsorted(shard_starts, ids, 'right') - 1
    by_shard = np.lexsort((np.arange(len(ids)), read_shards))
    same = read_shards[by_shard][1:] == read_shards[by_shard][:-1]
    gaps = np.diff(by_shard)[same]
    return {
        'entropy_bits': round(entropy, 4),
        'random_entropy_bits': round(random_entropy, 4),
        'entropy_score': round(entropy / random_entropy, 4) if random_entropy else 0.0,
        'distinct_shards_per_batch': {
            'mean': round(float(distinct.mean()), 2) if len(distinct) else 0.0,
            'min': int(distinct.min()) if len(distinct) else 0,
            'global_batch': int(nodes * ranks * batch)},
        'samples_between_reads': {
            'median': float(np.median(gaps)) if len(gaps) else None,
            'mean': round(float(gaps.mean()), 1) if len(gaps) else None},
        'scored_samples': int(len(ids)),
    }
