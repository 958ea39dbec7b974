"""The epoch's sample order as pure numpy functions of shard sizes and settings.

``apply_weights`` turns stream weights into samples per stream; ``get_epoch_order`` turns those
into the order every node, rank and worker reads an epoch in. Modules, one per concern:
``sampling`` (weights and per-shard draws), ``shuffle`` (the shuffle registry and built-ins),
``layout`` (canonical-node rows), ``batching`` (one epoch stream per batching method),
``partition`` (dealing to devices), ``checks`` (the settings' rules) and ``epoch``.
"""

from streaming.order.batching import BATCHING_METHODS
from streaming.order.epoch import get_epoch_order
from streaming.order.partition import PARTITION_ALGOS, check_partition, global_batches
from streaming.order.sampling import SAMPLING_METHODS, apply_weights
from streaming.order.shuffle import (
    CanonicalRow,
    ShuffleAlgo,
    default_num_canonical_nodes,
    default_shuffle_block_size,
    get_shuffle,
    register_shuffle,
    shuffle_names,
    unregister_shuffle,
)

__all__ = ['BATCHING_METHODS', 'PARTITION_ALGOS', 'SAMPLING_METHODS', 'CanonicalRow',
           'ShuffleAlgo', 'apply_weights', 'check_partition', 'default_num_canonical_nodes',
           'default_shuffle_block_size', 'get_epoch_order', 'get_shuffle', 'global_batches',
           'register_shuffle', 'shuffle_names', 'unregister_shuffle']
