"""The epoch's sample order as pure numpy functions of shard sizes and settings.

``apply_weights`` turns stream weights into samples per stream; ``get_epoch_order`` turns those
into the order every node, rank and worker reads an epoch in. Modules, one per concern:
``sampling`` (weights and per-shard draws), ``shuffle`` (canonical-node rows), ``batching``
(one epoch stream per batching method), ``partition`` (dealing to devices) and ``epoch``.
"""

from streaming.order.batching import BATCHING_METHODS
from streaming.order.epoch import default_num_canonical_nodes, get_epoch_order
from streaming.order.partition import PARTITION_ALGOS, check_partition, global_batches
from streaming.order.sampling import SAMPLING_METHODS, apply_weights
from streaming.order.shuffle import SHUFFLE_ALGOS, default_shuffle_block_size

__all__ = ['BATCHING_METHODS', 'PARTITION_ALGOS', 'SAMPLING_METHODS', 'SHUFFLE_ALGOS',
           'apply_weights', 'check_partition', 'default_num_canonical_nodes',
           'default_shuffle_block_size', 'get_epoch_order', 'global_batches']
