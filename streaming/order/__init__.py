"""The epoch's sample order as pure numpy functions of shard sizes and settings: one engine.

``apply_weights`` turns stream weights into samples per stream; ``get_epoch_order`` turns those
into the order every node, rank and worker reads an epoch in. Modules, in the order an epoch is
made: ``sampling`` (stream weights), ``resample`` (each shard's draw: shuffle units),
``shuffle`` (the shuffle table: ``spans`` holds the reference's built-ins, ``indexed`` the
index-computable ``index``), ``dealing`` (the partition table: positions to devices),
``exact`` (``random`` batching) and ``exact_batching`` (the other methods), ``checks`` (the
settings' rules) and ``epoch`` (the entry point).
"""

from streaming.order.dealing import PARTITIONS, check_partition, global_batches, register_partition
from streaming.order.epoch import get_epoch_order
from streaming.order.exact_batching import BATCHING_METHODS
from streaming.order.sampling import SAMPLING_METHODS, apply_weights
from streaming.order.shuffle import (
    SHUFFLES,
    ShuffleFn,
    default_num_canonical_nodes,
    default_shuffle_block_size,
    get_shuffle,
    register_shuffle,
    shuffle_block_size_in_effect,
    shuffle_names,
    shuffle_traits,
    unregister_shuffle,
)

__all__ = ['BATCHING_METHODS', 'PARTITIONS', 'SAMPLING_METHODS', 'SHUFFLES', 'ShuffleFn',
           'apply_weights', 'check_partition', 'default_num_canonical_nodes',
           'default_shuffle_block_size', 'get_epoch_order', 'get_shuffle', 'global_batches',
           'register_partition', 'register_shuffle', 'shuffle_block_size_in_effect',
           'shuffle_names', 'shuffle_traits', 'unregister_shuffle']
