"""The epoch's sample order as pure numpy functions of shard sizes and settings: one engine.

``apply_weights`` turns stream weights into samples per stream; ``plan(EpochSpec(...))`` turns
those into how every node, rank and worker reads an epoch (``get_epoch_order``: the whole array
in one call). This face is what the rest of the package imports. Modules, in the order an epoch
is made: ``sampling`` (stream weights), ``resample`` (each shard's draw: shuffle units),
``shuffles`` (the shuffle table, and a module per built-in shuffle: ``py1e``, ..., ``index``),
``ids`` (the epoch's sample ids), ``partition`` (the partition table: positions to devices),
``batching`` (the batching table and methods), ``first_use`` (when each shard is first and
last read), ``checks`` (the settings' rules) and ``plan`` (the entry point).
"""

from streaming.order.batching import (
    BATCHING,
    BATCHING_METHODS,
    BuiltinBatching,
    batching_fn,
    set_world_adapter,
)
from streaming.order.checks import check_choice, check_int
from streaming.order.first_use import iter_first_uses, last_uses, sample_time
from streaming.order.ids import final_ranges, newly_final
from streaming.order.memory import release
from streaming.order.partition import (
    PARTITIONS,
    check_partition,
    global_batches,
    register_partition,
)
from streaming.order.plan import EpochPlan, EpochSpec, IndexIds, WorkerOrder, get_epoch_order, plan
from streaming.order.resample import choose_per_shard, resample
from streaming.order.sampling import SAMPLING_METHODS, apply_weights, stream_proportions
from streaming.order.shuffles import (
    SHUFFLES,
    ShuffleFn,
    default_num_canonical_nodes,
    default_shuffle_block_size,
    get_shuffle,
    register_shuffle,
    shuffle_block_size_in_effect,
    shuffle_entry,
    shuffle_names,
    shuffle_traits,
    unregister_shuffle,
)
from streaming.order.shuffles.rows import FinalParts

__all__ = ['BATCHING', 'BATCHING_METHODS', 'BuiltinBatching', 'EpochPlan', 'EpochSpec',
           'FinalParts', 'IndexIds', 'PARTITIONS', 'SAMPLING_METHODS', 'SHUFFLES', 'ShuffleFn',
           'WorkerOrder', 'apply_weights', 'batching_fn', 'check_choice', 'check_int',
           'check_partition', 'choose_per_shard', 'default_num_canonical_nodes',
           'default_shuffle_block_size', 'final_ranges', 'get_epoch_order', 'get_shuffle',
           'global_batches', 'iter_first_uses', 'last_uses', 'newly_final', 'plan',
           'register_partition', 'register_shuffle', 'release', 'resample', 'sample_time',
           'set_world_adapter', 'shuffle_block_size_in_effect', 'shuffle_entry',
           'shuffle_names', 'shuffle_traits', 'stream_proportions', 'unregister_shuffle']
