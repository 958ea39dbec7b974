"""The reference's partition of epoch positions over devices (``orig`` and ``relaxed``), exactly.

An epoch of ``N`` positions is cut into ``C`` canonical-node rows (row ``c`` is positions
``N * c // C`` up to ``N * (c + 1) // C``). Rows are made equally long, ``ceil(N / C)``, by
repeating their last position; when ``C < P`` they are lengthened further to a multiple of
``P / C`` by repeating positions just before their end. The rows are read in turn (position
``k`` of every row, then ``k + 1``), the first ``drop_first`` positions (rounded down to a
multiple of ``P``) are skipped, and what remains is dealt to physical nodes in turn. A node's
positions go to its ranks in turn, topped up to a multiple of the ranks by repeating a few of
its own; a rank's positions, padded with -1 to whole rounds of ``workers x batch``, are cut
into batches dealt to its workers in turn. With fewer positions than rows, row ``c`` holds
position ``c % N``.

``relaxed`` is ``orig`` unless a run resumes (``initial_physical_nodes``) on a node count that
neither divides nor is divided by ``C``: then the epoch is dealt as the first run did, and its
global batches, read in order, are dealt again to the new topology.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ['deal_positions']


def _rows(num_samples: int, num_rows: int, num_nodes: int) -> np.ndarray:
    """Canonical-node rows of positions, as equal-length rows (C, L)."""
    if num_samples < num_rows:
        warnings.warn(f'an epoch of {num_samples} samples over {num_rows} canonical nodes: as in '
                      'the reference, row c reads sample c % samples, so samples repeat; use '
                      'fewer canonical nodes', stacklevel=4)
        return (np.arange(num_rows, dtype=np.int64) % max(num_samples, 1))[:, None]
    width = -(-num_samples // num_rows)
    starts = np.arange(num_rows, dtype=np.int64) * num_samples // num_rows
    stops = np.arange(1, num_rows + 1, dtype=np.int64) * num_samples // num_rows
    column = np.arange(width, dtype=np.int64)
    rows = starts[:, None] + np.minimum(column[None, :], (stops - starts - 1)[:, None])
    if num_rows < num_nodes:
        ratio = num_nodes // num_rows
        padding = -width % ratio
        if padding:
            columns = (np.arange(padding) + width - padding - ratio + 1) % width
            rows = np.concatenate([rows, rows[:, columns]], 1)
    return rows


def _deal_orig(num_samples: int, num_rows: int, num_nodes: int, ranks: int, workers: int,
               batch: int, drop_first: int) -> np.ndarray:
    drop_first -= drop_first % num_nodes
    stream = _rows(num_samples, num_rows, num_nodes).T.ravel()[drop_first:]
    per_node = stream.reshape(-1, num_nodes).T
    count = per_node.shape[1]
    shortfall = -count % ranks
    if shortfall and count:
        first = max(count - ranks + 1 - shortfall, 0)
        per_node = np.concatenate([per_node, per_node[:, (np.arange(shortfall) + first) % count]],
                                  1)
    per_rank = per_node.reshape(num_nodes, -1, ranks)
    rounds = per_rank.shape[1]
    padded = -(-rounds // (workers * batch)) * workers * batch
    if padded > rounds:
        per_rank = np.concatenate(
            [per_rank, np.full((num_nodes, padded - rounds, ranks), -1, np.int64)], 1)
    out = per_rank.transpose(0, 2, 1).reshape(num_nodes, ranks, -1, workers, batch)
    return out.transpose(0, 1, 3, 2, 4)


def deal_positions(partition_algo: str, num_samples: int, num_canonical_nodes: int,
                   num_physical_nodes: int, ranks_per_node: int, workers_per_rank: int,
                   batch_size: int, drop_first: int = 0,
                   initial_physical_nodes: int | None = None) -> np.ndarray:
    """Positions ``(nodes, ranks, workers, batches per worker, batch)``, -1 for none."""
    canonical, nodes = num_canonical_nodes, num_physical_nodes
    workers = max(workers_per_rank, 1)
    if num_samples == 0:
        return np.empty((nodes, ranks_per_node, workers, 0, batch_size), np.int64)
    compatible = canonical % nodes == 0 or nodes % canonical == 0
    if partition_algo == 'orig' or initial_physical_nodes is None or compatible:
        return _deal_orig(num_samples, canonical, nodes, ranks_per_node, workers, batch_size,
                          drop_first)
    global_batch = nodes * ranks_per_node * batch_size
    first_batch, remainder = divmod(global_batch, initial_physical_nodes * ranks_per_node)
    if remainder:
        raise ValueError(
            f'resuming with partition_algo=relaxed needs the global batch ({global_batch}) to '
            f'split evenly over initial_physical_nodes ({initial_physical_nodes}) x '
            f'ranks_per_node ({ranks_per_node})')
    first_run = _deal_orig(num_samples, canonical, initial_physical_nodes, ranks_per_node,
                           workers, first_batch, drop_first)
    flat = first_run.transpose(3, 2, 0, 1, 4).ravel()
    batches = -(-len(flat) // global_batch)
    per_worker = -(-batches // workers)
    flat = np.concatenate([flat, np.full(per_worker * workers * global_batch - len(flat), -1,
                                         np.int64)])
    out = flat.reshape(per_worker, workers, nodes, ranks_per_node, batch_size)
    return out.transpose(2, 3, 1, 0, 4)
