"""One epoch's order with ``random`` batching, sample for sample the reference's.

The epoch's big ids (see ``resample``) are dealt to devices as positions (``dealing``); when
shuffling, position ``p`` reads big id ``shuffle[p]`` (``spans``); big ids then map to sample
ids. This is the composition the reference's ``random`` batching performs, and, stream by
stream, what its other batching methods start from (``exact_batching``).
"""

from __future__ import annotations

import numpy as np

from streaming.order.dealing import deal_positions
from streaming.order.resample import Resampled, resample
from streaming.order.spans import shuffle_positions

__all__ = ['dealt_ids', 'random_order']


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


def random_order(*, shard_sizes: np.ndarray, shard_streams: np.ndarray,
                 stream_choose: np.ndarray, epoch: int, seed: int, shuffle: bool,
                 shuffle_algo: str, block_size: int, num_canonical_nodes: int,
                 partition_algo: str, num_physical_nodes: int, ranks_per_node: int,
                 workers_per_rank: int, batch_size: int, sampling_method: str,
                 sampling_granularity: int, sample_in_epoch: int,
                 initial_physical_nodes: int | None) -> np.ndarray:
    """Sample ids ``(nodes, ranks, workers, batches per worker, batch)``, -1 for none."""
    drawn = resample(shard_sizes, shard_streams, stream_choose, seed=seed, epoch=epoch,
                     sampling_method=sampling_method,
                     sampling_granularity=sampling_granularity, shuffle=shuffle)
    return dealt_ids(drawn, shuffle=shuffle, shuffle_algo=shuffle_algo, block_size=block_size,
                     num_canonical_nodes=num_canonical_nodes, partition_algo=partition_algo,
                     num_physical_nodes=num_physical_nodes, ranks_per_node=ranks_per_node,
                     workers_per_rank=workers_per_rank, batch_size=batch_size,
                     drop_first=sample_in_epoch, initial_physical_nodes=initial_physical_nodes,
                     seed=seed, epoch=epoch)
