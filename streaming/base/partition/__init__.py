"""The reference's ``streaming.base.partition``: sample positions dealt to devices and workers.

Built on ``streaming.order`` (the unshuffled epoch of one shard of
``num_samples`` samples is exactly the partition of positions ``0 .. num_samples - 1``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import NDArray

from streaming.order.epoch import get_epoch_order

__all__ = ['algos', 'get_partitions', 'get_partitions_orig', 'get_partitions_relaxed']


def _partitions(algo: str, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                ranks_per_node: int, workers_per_rank: int, batch_size: int, drop_first: int,
                initial_physical_nodes: int | None) -> NDArray[np.int64]:
    if num_samples <= drop_first:
        raise ValueError(f'drop_first ({drop_first}) must be less than num_samples '
                         f'({num_samples}).')
    sizes = np.array([num_samples], np.int64)
    return get_epoch_order(shard_sizes=sizes, shard_streams=np.zeros(1, np.int64),
                           stream_choose=sizes, epoch=0, seed=0, shuffle=False,
                           num_canonical_nodes=num_canonical_nodes, partition_algo=algo,
                           num_physical_nodes=num_physical_nodes, ranks_per_node=ranks_per_node,
                           workers_per_rank=workers_per_rank, batch_size=batch_size,
                           sample_in_epoch=drop_first,
                           initial_physical_nodes=initial_physical_nodes)


def get_partitions_orig(num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                        ranks_per_node: int, workers_per_rank: int, batch_size: int,
                        drop_first: int = 0,
                        initial_physical_nodes: int | None = None) -> NDArray[np.int64]:
    """``(nodes, ranks, workers, batches, batch_size)`` sample positions, -1 for none.

    The canonical and physical node counts must divide one another.
    """
    return _partitions('orig', num_samples, num_canonical_nodes, num_physical_nodes,
                       ranks_per_node, workers_per_rank, batch_size, drop_first, None)


def get_partitions_relaxed(num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                           ranks_per_node: int, workers_per_rank: int, batch_size: int,
                           drop_first: int = 0,
                           initial_physical_nodes: int | None = None) -> NDArray[np.int64]:
    """As ``get_partitions_orig``, also for any node count when resuming.

    A run that started on ``initial_physical_nodes`` nodes keeps the same global batches.
    """
    return _partitions('relaxed', num_samples, num_canonical_nodes, num_physical_nodes,
                       ranks_per_node, workers_per_rank, batch_size, drop_first,
                       initial_physical_nodes)


algos: dict[str, Callable[..., NDArray[np.int64]]] = {
    'orig': get_partitions_orig,
    'relaxed': get_partitions_relaxed,
}


def get_partitions(algo: str, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                   ranks_per_node: int, workers_per_rank: int, batch_size: int,
                   drop_first: int = 0,
                   initial_physical_nodes: int | None = None) -> NDArray[np.int64]:
    """Partition with the algorithm named ``algo`` (``orig`` or ``relaxed``)."""
    if algo not in algos:
        raise ValueError(f'Unknown partition algorithm {algo!r}; expected one of {list(algos)}.')
    return algos[algo](num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node,
                       workers_per_rank, batch_size, drop_first, initial_physical_nodes)
