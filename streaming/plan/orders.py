"""The epoch orders a plan replays, from the real order engine, as steps of shards per node.

A node's *step* ``g`` is global batch ``g`` of each of its ranks (batch ``g // workers`` of
worker ``g % workers``, the way a DataLoader deals them); ``streaming.order.first_use`` times a
sample at ``g * batch_size + slot``, so the scheduler's first uses and these steps agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streaming.cache.budget import samples_that_fit
from streaming.order import apply_weights, default_num_canonical_nodes, get_epoch_order
from streaming.order.shuffles import default_shuffle_block_size, shuffle_traits
from streaming.plan.inputs import DatasetShape, RunSettings

__all__ = ['NodeSteps', 'block_size_in_effect', 'canonical_nodes', 'epoch_orders', 'node_steps']


def canonical_nodes(run: RunSettings) -> int:
    return run.num_canonical_nodes or default_num_canonical_nodes(run.shuffle_algo, run.nodes)


def block_size_in_effect(shape: DatasetShape, run: RunSettings) -> int:
    """The shuffle block size the dataset would use: given or default, capped.

    Under a cache limit the cap is ``ShardCache.samples_that_fit`` (the dataset's own rule).
    """
    block = run.shuffle_block_size or default_shuffle_block_size(canonical_nodes(run))
    if run.cache_limit is None or not run.shuffle or \
            not shuffle_traits(run.shuffle_algo).uses_block_size:
        return block
    cap = samples_that_fit(run.cache_bytes, shape.held_bytes, shape.samples)
    return block if cap is None else min(block, cap)


def epoch_orders(shape: DatasetShape, run: RunSettings, epoch: int,
                 block_size: int) -> np.ndarray:
    """``(nodes, ranks, workers, batches, batch)`` sample ids of ``epoch`` (the real engine)."""
    stream_sizes = np.bincount(shape.streams, weights=shape.samples,
                               minlength=int(shape.streams.max()) + 1).astype(np.int64)
    proportion = run.proportions
    if proportion is not None and len(proportion) != len(stream_sizes):
        raise ValueError(f'run: {len(proportion)} proportions for {len(stream_sizes)} streams')
    choose = apply_weights(stream_sizes, proportion=proportion, seed=run.seed) \
        if proportion is not None else stream_sizes
    return get_epoch_order(
        shard_sizes=shape.samples, shard_streams=shape.streams, stream_choose=choose,
        epoch=epoch, seed=run.seed, shuffle=run.shuffle, shuffle_algo=run.shuffle_algo,
        shuffle_block_size=block_size, num_canonical_nodes=canonical_nodes(run),
        num_physical_nodes=run.nodes, ranks_per_node=run.ranks_per_node,
        workers_per_rank=run.loader_workers, batch_size=run.batch_size)


@dataclass
class NodeSteps:
    """One node's epoch as steps: per step and rank, the shards its batch reads, in order.

    ``reads[g][r]`` lists the shards rank ``r`` reads in step ``g``, in order, a shard once per
    run of consecutive samples from it (a reader readies the shard again at each such run);
    ``samples[g]`` is the samples the node's ranks take in step ``g``; ``order`` is the node's
    ``(ranks, workers, batches, batch)`` order, for the scheduler's first uses.
    """

    order: np.ndarray
    reads: list[list[list[int]]]
    samples: np.ndarray
    sample_shards: np.ndarray  # (steps, ranks * batch) shard of each read (-1: padding).

    @property
    def steps(self) -> int:
        return len(self.samples)


def node_steps(order: np.ndarray, shard_starts: np.ndarray) -> NodeSteps:
    """Group a node's ``(ranks, workers, batches, batch)`` order into steps (see module doc)."""
    ranks, workers, batches, batch = order.shape
    ids = order.transpose(2, 1, 0, 3).reshape(batches * workers, ranks, batch)
    shards = np.where(ids >= 0, np.searchsorted(shard_starts, ids, 'right') - 1, -1)
    counts = (ids >= 0).sum(axis=(1, 2))
    # Drop the all-padding steps at the end (workers with fewer batches).
    used = np.flatnonzero(counts)
    last = int(used[-1]) + 1 if len(used) else 0
    shards, counts = shards[:last], counts[:last]
    steps, flat = shards.shape[0], shards.reshape(-1)
    rows = np.repeat(np.arange(steps * ranks), batch)
    keep = flat >= 0
    row_of, shard_of = rows[keep], flat[keep]
    new_run = np.ones(len(shard_of), bool)  # A sample from another shard than the one before.
    new_run[1:] = (shard_of[1:] != shard_of[:-1]) | (row_of[1:] != row_of[:-1])
    row_of, shard_of = row_of[new_run], shard_of[new_run]
    bounds = np.searchsorted(row_of, np.arange(1, steps * ranks))
    per_row = np.split(shard_of, bounds)
    reads = [[per_row[g * ranks + r].tolist() for r in range(ranks)] for g in range(steps)]
    return NodeSteps(order, reads, counts.astype(np.int64), shards.reshape(last, -1))
