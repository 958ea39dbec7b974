"""The reference's ``streaming.base.partition``: sample positions dealt to devices and workers.

``algos`` is the order engine's partition table itself (``streaming.order.partition.PARTITIONS``):
``algos['mine'] = fn``, with the reference's signature ``fn(num_samples, num_canonical_nodes,
num_physical_nodes, ranks_per_node, workers_per_rank, batch_size, drop_first,
initial_physical_nodes) -> positions``, makes ``StreamingDataset(partition_algo='mine')`` deal
with ``fn``, as in the reference.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from streaming.order.partition import PARTITIONS

__all__ = ['algos', 'get_partitions', 'get_partitions_orig', 'get_partitions_relaxed']

algos = PARTITIONS
get_partitions_orig = PARTITIONS['orig']
get_partitions_relaxed = PARTITIONS['relaxed']


def get_partitions(algo: str, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                   ranks_per_node: int, workers_per_rank: int, batch_size: int,
                   drop_first: int = 0,
                   initial_physical_nodes: int | None = None) -> NDArray[np.int64]:
    """Partition with the algorithm registered as ``algo`` (``orig``, ``relaxed``, or yours)."""
    if algo not in algos:
        raise ValueError(f'Unknown partition algorithm {algo!r}; expected one of {list(algos)}.')
    return algos[algo](num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node,
                       workers_per_rank, batch_size, drop_first, initial_physical_nodes)
