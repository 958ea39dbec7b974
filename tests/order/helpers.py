"""Shared helpers for the epoch-order tests: small datasets and views of an order array."""

from __future__ import annotations

from collections import Counter

import numpy as np

from streaming.order import get_epoch_order, global_batches

SHUFFLED_ALGOS = ('py1b', 'py1br', 'py1e', 'py1s', 'py2s', 'index')


def one_stream(shard_sizes: list[int]) -> dict:
    """Arguments for a single stream drawn exactly once."""
    sizes = np.array(shard_sizes, dtype=np.int64)
    return {'shard_sizes': sizes, 'shard_streams': np.zeros(len(sizes), np.int64),
            'stream_choose': np.array([sizes.sum()])}


def order(data: dict | None = None, **settings) -> np.ndarray:
    """``get_epoch_order`` with small defaults; ``settings`` override them."""
    arguments = {'epoch': 0, 'seed': 11, 'shuffle': True, 'shuffle_algo': 'py1e',
                 'shuffle_block_size': 16, 'num_canonical_nodes': 2, 'num_physical_nodes': 1,
                 'ranks_per_node': 1, 'workers_per_rank': 1, 'batch_size': 4}
    arguments.update(data if data is not None else one_stream([10] * 8))
    arguments.update(settings)
    return get_epoch_order(**arguments)


def batch_multisets(epoch_order: np.ndarray) -> list[Counter]:
    """Each global batch as a multiset of sample ids."""
    return [Counter(batch.tolist()) for batch in global_batches(epoch_order)]


def batch_sets(epoch_order: np.ndarray) -> list[frozenset]:
    return [frozenset(batch.tolist()) for batch in global_batches(epoch_order)]


def rank_sequence(epoch_order: np.ndarray, node: int, rank: int) -> list[int]:
    """A rank's samples in the order torch's DataLoader yields them (workers round-robin)."""
    workers, per_worker = epoch_order.shape[2:4]
    batches = [epoch_order[node, rank, j % workers, j // workers]
               for j in range(workers * per_worker)]
    return [int(i) for batch in batches for i in batch if i >= 0]


def stream_order(epoch_order: np.ndarray, start: int = 0) -> np.ndarray:
    """The epoch stream back from an order: global batches in turn, within each by slot, rank,
    and node counted from the node of stream position ``start`` (-1 kept)."""
    nodes = epoch_order.shape[0]
    by_stream = epoch_order.transpose(3, 2, 4, 1, 0)  # batch, worker, slot, rank, node
    by_stream = np.roll(by_stream, -(start % nodes), axis=4)
    return by_stream.reshape(-1)


def shard_of(ids: np.ndarray, shard_sizes: np.ndarray) -> np.ndarray:
    """Index of the shard holding each global sample id."""
    return np.searchsorted(np.cumsum(shard_sizes), ids, 'right')


def topologies(global_batch: int, max_nodes: int = 2) -> list[tuple[int, int, int, int]]:
    """(nodes, ranks per node, workers, batch) with the given global batch size."""
    found = []
    for nodes in range(1, max_nodes + 1):
        for ranks in (1, 2, 4):
            for workers in (0, 1, 2, 4):
                if global_batch % (nodes * ranks) == 0:
                    found.append((nodes, ranks, workers, global_batch // (nodes * ranks)))
    return found
