"""One epoch's sample order for every node, rank, worker and batch: the single entry point.

``get_epoch_order`` is a pure function of arrays and settings. With a built-in shuffle (or none)
it is the reference's order, sample for sample, for every batching method: ``exact`` (random
batching) and ``exact_batching`` (stratified, per_stream, device_per_stream). A shuffle
registered under a new name takes our layout instead: it draws each shard's samples
(``sampling``), deals them to canonical nodes and shuffles each node's row (``layout``, with the
registered ``shuffle``), turns the rows into one epoch stream (``batching``) and deals that
stream to devices (``partition``).
"""

from __future__ import annotations

import numpy as np

from streaming.order.batching import (
    BATCHING_METHODS,
    EpochStream,
    device_per_stream_batching,
    per_stream_batching,
    random_batching,
    stratified_batching,
    stratified_counts,
)
from streaming.order.checks import check_choice, check_int
from streaming.order.exact import random_order
from streaming.order.exact_batching import StreamRun, exact_stream_batching
from streaming.order.layout import Layout, canonical_layout
from streaming.order.partition import check_partition, deal_to_devices
from streaming.order.sampling import SAMPLING_METHODS, draw_shards
from streaming.order.shuffle import default_shuffle_block_size, get_shuffle
from streaming.order.spans import EXACT_SHUFFLE_ALGOS

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
            ``py2s`` or one added with ``register_shuffle`` (see ``streaming.order.shuffle``).
        shuffle_block_size: window of the block shuffles; default
            ``max(4_000_000 // num_canonical_nodes, 1 << 18)``.
        num_canonical_nodes: the run's fixed node count that the order is built for.
        partition_algo: ``orig`` or ``relaxed`` (see ``partition.check_partition``).
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
    block_size = shuffle_block_size or default_shuffle_block_size(num_canonical_nodes)
    exact = not shuffle or shuffle_algo in EXACT_SHUFFLE_ALGOS
    if exact and batching_method != 'random':
        run = StreamRun(sizes, streams, choose, proportions, epoch, seed, shuffle, shuffle_algo,
                        block_size, num_canonical_nodes, partition_algo, initial_physical_nodes,
                        ranks_per_node, workers_per_rank, sampling_method, sampling_granularity)
        return exact_stream_batching(batching_method, run, num_physical_nodes=num_physical_nodes,
                                     batch_size=batch_size, sample_in_epoch=sample_in_epoch)
    if exact:
        return random_order(
            shard_sizes=sizes, shard_streams=streams, stream_choose=choose, epoch=epoch,
            seed=seed, shuffle=shuffle, shuffle_algo=shuffle_algo, block_size=block_size,
            num_canonical_nodes=num_canonical_nodes, partition_algo=partition_algo,
            num_physical_nodes=num_physical_nodes, ranks_per_node=ranks_per_node,
            workers_per_rank=workers_per_rank, batch_size=batch_size,
            sampling_method=sampling_method, sampling_granularity=sampling_granularity,
            sample_in_epoch=sample_in_epoch, initial_physical_nodes=initial_physical_nodes)
    draw = draw_shards(sizes, streams, choose, seed=seed, epoch=epoch,
                       sampling_method=sampling_method,
                       sampling_granularity=sampling_granularity)
    num_devices = num_physical_nodes * ranks_per_node
    global_batch = num_devices * batch_size

    def layout_of(shards: np.ndarray, tag: int, block: int) -> Layout:
        return canonical_layout(draw, shards, num_canonical_nodes=num_canonical_nodes,
                                shuffle=shuffle, shuffle_algo=shuffle_algo, block_size=block,
                                seed=seed, epoch=epoch, layout_tag=tag)

    def per_stream_layouts(blocks: list[int]) -> list[Layout]:
        return [layout_of(np.flatnonzero(streams == k), k + 1, blocks[k])
                for k in range(len(choose))]

    stream: EpochStream
    if batching_method == 'random':
        stream = random_batching(layout_of(np.arange(len(sizes)), 0, block_size), sample_in_epoch)
    elif batching_method == 'stratified':
        counts = stratified_counts(proportions, global_batch)
        blocks = [max(1, int(block_size * share)) for share in proportions.tolist()]
        stream = stratified_batching(per_stream_layouts(blocks), counts, global_batch,
                                     sample_in_epoch)
    elif batching_method == 'per_stream':
        stream = per_stream_batching(per_stream_layouts([block_size] * len(choose)),
                                     global_batch, shuffle=shuffle, seed=seed, epoch=epoch,
                                     sample_in_epoch=sample_in_epoch)
    else:
        stream = device_per_stream_batching(
            per_stream_layouts([block_size] * len(choose)),
            num_canonical_nodes=num_canonical_nodes, batch_size=batch_size,
            num_devices=num_devices, shuffle=shuffle, seed=seed, epoch=epoch,
            sample_in_epoch=sample_in_epoch)
    per_batch = 1 if stream.atom_width > 1 else batch_size
    return deal_to_devices(stream.read, stream.length, start=stream.start,
                           num_physical_nodes=num_physical_nodes, ranks_per_node=ranks_per_node,
                           workers_per_rank=workers_per_rank, batch_size=per_batch,
                           atom_width=stream.atom_width)
