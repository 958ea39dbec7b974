"""One epoch's sample order for every node, rank, worker and batch: the single entry point.

``get_epoch_order`` is a pure function of arrays and settings, and there is one way it is made:
the epoch's draw from every shard (``resample``) gives *shuffle units*; the shuffle registered
under ``shuffle_algo`` (``shuffle``: the reference's six, ``index``, or one of yours) permutes
their positions; the partition registered under ``partition_algo`` (``dealing``) deals positions
to nodes, ranks, workers and batches. ``random`` batching is that composition (``exact``); the
other methods combine it stream by stream (``exact_batching``). With the reference's shuffles
and partitions it is the reference's order, sample for sample.
"""

from __future__ import annotations

import numpy as np

from streaming.order.checks import check_choice, check_int
from streaming.order.dealing import check_partition
from streaming.order.exact import random_order
from streaming.order.exact_batching import BATCHING_METHODS, StreamRun, exact_stream_batching
from streaming.order.sampling import SAMPLING_METHODS
from streaming.order.shuffle import get_shuffle, shuffle_block_size_in_effect

__all__ = ['get_epoch_order']


def _as_counts(name: str, values: np.ndarray) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f'`{name}` must be a 1-D array of ints, got {array!r}')
    array = array.astype(np.int64)
    if (array < 0).any():
        raise ValueError(f'`{name}` must not be negative, got {array}')
    return array


def _proportions(given: np.ndarray | None, choose: np.ndarray) -> np.ndarray:
    if given is None:
        total = int(choose.sum())
        return choose / total if total else np.zeros(len(choose))
    array = np.asarray(given, np.float64)
    if array.shape != choose.shape or not (array >= 0).all():
        raise ValueError(f'`stream_proportions` must hold one non-negative number per stream '
                         f'({len(choose)}), got {given!r}')
    return array


def get_epoch_order(*, shard_sizes: np.ndarray, shard_streams: np.ndarray,
                    stream_choose: np.ndarray, epoch: int, seed: int, shuffle: bool,
                    shuffle_algo: str = 'py1e', shuffle_block_size: int | None = None,
                    num_canonical_nodes: int, partition_algo: str = 'relaxed',
                    num_physical_nodes: int = 1, ranks_per_node: int = 1,
                    workers_per_rank: int = 1, batch_size: int,
                    batching_method: str = 'random', sampling_method: str = 'balanced',
                    sampling_granularity: int = 1, sample_in_epoch: int = 0,
                    initial_physical_nodes: int | None = None,
                    stream_proportions: np.ndarray | None = None) -> np.ndarray:
    """The epoch's global sample ids for every (node, rank, worker, batch, slot).

    Args:
        shard_sizes: samples in each shard, all streams' shards concatenated.
        shard_streams: the stream each shard belongs to.
        stream_choose: samples to draw from each stream this epoch (see ``apply_weights``).
        epoch: the epoch number; with ``seed`` it selects the draw and the order.
        seed: the run's seed; the same (seed, epoch) always gives the same order.
        shuffle: whether to shuffle (else units are read in dataset order).
        shuffle_algo: a registered shuffle: ``naive``, ``py1b``, ``py1br``, ``py1e``, ``py1s``,
            ``py2s``, ``index`` or one added with ``register_shuffle`` (or put in
            ``streaming.base.shuffle.algos``; see ``streaming.order.shuffle``).
        shuffle_block_size: window of the block shuffles; default
            ``max(4_000_000 // num_canonical_nodes, 1 << 18)``.
        num_canonical_nodes: the run's fixed node count that the order is built for.
        partition_algo: ``orig``, ``relaxed`` or one put in ``streaming.base.partition.algos``
            (see ``dealing.check_partition``).
        num_physical_nodes: nodes of this run.
        ranks_per_node: devices per node.
        workers_per_rank: dataloader workers per device (0, loading in the main process, counts
            as one).
        batch_size: samples per device batch.
        batching_method: ``random``, ``stratified``, ``per_stream`` or ``device_per_stream``.
        sampling_method: ``balanced`` (a new partial draw each epoch) or ``fixed``.
        sampling_granularity: partial draws take samples from shards in runs of this many.
        sample_in_epoch: samples of this epoch already consumed (in global-batch order) to skip.
        initial_physical_nodes: node count of the run being resumed, if any.
        stream_proportions: each stream's ``proportion`` (see ``sampling.stream_proportions``);
            sets the non-random methods' per-stream counts and block sizes. Default: each
            stream's share of ``stream_choose``.

    Returns:
        int64 array ``(nodes, ranks, workers, batches per worker, batch_size)`` of sample ids
        (indices into all shards' samples concatenated), -1 where there is none. Worker
        ``(n, r, w)`` yields ``order[n, r, w]`` in order, skipping -1.

    """
    sizes = _as_counts('shard_sizes', shard_sizes)
    streams = _as_counts('shard_streams', shard_streams)
    choose = _as_counts('stream_choose', stream_choose)
    if len(streams) != len(sizes):
        raise ValueError(f'`shard_streams` has {len(streams)} entries but `shard_sizes` has '
                         f'{len(sizes)}')
    if len(streams) and streams.max() >= len(choose):
        raise ValueError(f'`shard_streams` names stream {streams.max()} but `stream_choose` has '
                         f'only {len(choose)} streams')
    for name, value, minimum in (('epoch', epoch, 0), ('seed', seed, 0),
                                 ('num_canonical_nodes', num_canonical_nodes, 1),
                                 ('num_physical_nodes', num_physical_nodes, 1),
                                 ('ranks_per_node', ranks_per_node, 1),
                                 ('workers_per_rank', workers_per_rank, 0),
                                 ('batch_size', batch_size, 1),
                                 ('sampling_granularity', sampling_granularity, 1),
                                 ('sample_in_epoch', sample_in_epoch, 0)):
        check_int(name, value, minimum)
    if shuffle_block_size is not None:
        check_int('shuffle_block_size', shuffle_block_size, 1)
    if initial_physical_nodes is not None:
        check_int('initial_physical_nodes', initial_physical_nodes, 1)
    get_shuffle(shuffle_algo)  # Raises for an unregistered name, shuffling or not.
    check_choice('batching_method', batching_method, BATCHING_METHODS)
    check_choice('sampling_method', sampling_method, SAMPLING_METHODS)
    check_partition(partition_algo=partition_algo, num_canonical_nodes=num_canonical_nodes,
                    num_physical_nodes=num_physical_nodes,
                    initial_physical_nodes=initial_physical_nodes)
    proportions = _proportions(stream_proportions, choose)
    block_size = shuffle_block_size_in_effect(shuffle_block_size, num_canonical_nodes)
    if batching_method != 'random':
        run = StreamRun(sizes, streams, choose, proportions, epoch, seed, shuffle, shuffle_algo,
                        block_size, num_canonical_nodes, partition_algo, initial_physical_nodes,
                        ranks_per_node, workers_per_rank, sampling_method, sampling_granularity)
        return exact_stream_batching(batching_method, run, num_physical_nodes=num_physical_nodes,
                                     batch_size=batch_size, sample_in_epoch=sample_in_epoch)
    return random_order(
        shard_sizes=sizes, shard_streams=streams, stream_choose=choose, epoch=epoch,
        seed=seed, shuffle=shuffle, shuffle_algo=shuffle_algo, block_size=block_size,
        num_canonical_nodes=num_canonical_nodes, partition_algo=partition_algo,
        num_physical_nodes=num_physical_nodes, ranks_per_node=ranks_per_node,
        workers_per_rank=workers_per_rank, batch_size=batch_size,
        sampling_method=sampling_method, sampling_granularity=sampling_granularity,
        sample_in_epoch=sample_in_epoch, initial_physical_nodes=initial_physical_nodes)
