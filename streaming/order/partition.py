"""Partitioning: deal a stream of samples to nodes, ranks, workers and batches.

The epoch is a *stream* (see ``batching``) whose consecutive runs of ``global batch size``
samples are the global batches. The ``k``-th global batch goes to every device's ``k``-th batch:
stream position ``p`` goes to physical node ``p % P``, and within the batch a node's samples go
to its ranks in turn. Position ``p`` of a canonical-node stream belongs to canonical node
``p % C``, so when ``P`` divides ``C`` node ``n`` reads only canonical nodes ``c = n (mod P)``,
and when ``C`` divides ``P`` canonical node ``c`` is read only by nodes ``n = c (mod C)``.

A rank's batches are dealt to its dataloader workers round-robin (batch ``j`` to worker
``j % W``), as torch's DataLoader reads them back, so a rank yields the same batches in the same
order whatever its number of workers. Nothing here depends on the topology except this final
dealing, hence elastic determinism: the samples of each global batch are the same for any
(nodes, ranks per node, workers, per-device batch) with the same global batch size.

Padding: when the epoch does not fill the last global batch, it is topped up to a multiple of
the number of devices with repeats of that batch's own samples (taken from the same node), so
every device gets the same number of samples; the rest of the last batch, and the batch slots of
workers with fewer batches than their siblings, hold -1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streaming.order.checks import check_choice

__all__ = ['PARTITION_ALGOS', 'check_partition', 'deal_to_devices', 'global_batches']

PARTITION_ALGOS = ('orig', 'relaxed')

# Stream samples written per step (bounds temporary memory).
_CHUNK = 1 << 20


def check_partition(*, partition_algo: str, num_canonical_nodes: int, num_physical_nodes: int,
                    initial_physical_nodes: int | None = None) -> None:
    """Raise ValueError unless the canonical and physical node counts fit ``partition_algo``.

    Both algorithms need one count to divide the other, so that each physical node reads whole
    canonical nodes (or a whole canonical node is shared by a fixed set of physical nodes).
    ``relaxed`` also accepts any node count when resuming a run that started on
    ``initial_physical_nodes`` nodes: the global batches are unchanged; only download locality
    is lost.
    """
    check_choice('partition_algo', partition_algo, PARTITION_ALGOS)
    canonical, physical = num_canonical_nodes, num_physical_nodes
    if canonical % physical == 0 or physical % canonical == 0:
        return
    if partition_algo == 'relaxed' and initial_physical_nodes is not None:
        return
    raise ValueError(
        f'num_canonical_nodes ({canonical}) and num_physical_nodes ({physical}) must divide one '
        f'another (e.g. num_canonical_nodes = a multiple of {physical}); otherwise every node '
        'would download every shard. Pass num_canonical_nodes explicitly, or resume with '
        "partition_algo='relaxed' and the first run's initial_physical_nodes.")


def _write_full(out_view: np.ndarray, values: np.ndarray, first_node: int) -> None:
    """Write ``values`` (..., nodes, atom) whose node axis counts from ``first_node``."""
    nodes = values.shape[-2]
    if first_node == 0:
        out_view[...] = values
        return
    out_view[..., first_node:, :] = values[..., :nodes - first_node, :]
    out_view[..., :first_node, :] = values[..., nodes - first_node:, :]


def _write_last(out: np.ndarray, values: np.ndarray, first_node: int, batch: int) -> None:
    """Deal a partial last global batch, topped up from each node's own samples."""
    nodes, ranks, workers = out.shape[:3]
    count = len(values)
    per_rank = -(-count // (nodes * ranks))
    relative = np.arange(nodes)[:, None]
    ordinal = np.arange(ranks * per_rank)[None, :]
    have = (count - relative + nodes - 1) // nodes  # samples at positions relative + k * nodes
    source = relative + nodes * (ordinal % np.maximum(have, 1))
    source = np.where(have > 0, source, (relative + nodes * ordinal) % count)
    node = np.broadcast_to((relative + first_node) % nodes, source.shape)
    out[node, ordinal % ranks, batch % workers, batch // workers, ordinal // ranks] = \
        values[source]


def deal_to_devices(read: Callable[[int, int], np.ndarray], length: int, *, start: int,
            num_physical_nodes: int, ranks_per_node: int, workers_per_rank: int,
            batch_size: int, atom_width: int = 1) -> np.ndarray:
    """Deal stream positions ``start + [0, length)`` to devices, global batch by global batch.

    ``read(a, b)`` returns the stream's items ``a:b`` (relative to ``start``), each an atom of
    ``atom_width`` samples (shape ``(b - a,)`` or ``(b - a, atom_width)``); a device batch is
    ``batch_size`` atoms. ``start`` fixes which node gets which position (``(start + i) % P``),
    keeping each node on its own canonical nodes when resuming mid-epoch. Returns
    ``(nodes, ranks, workers, batches per worker, batch_size * atom_width)`` int64 sample ids,
    -1 where there is none.
    """
    nodes, ranks, workers = num_physical_nodes, ranks_per_node, max(workers_per_rank, 1)
    global_batch = nodes * ranks * batch_size
    full, rest = divmod(length, global_batch)
    if rest and atom_width != 1:
        raise ValueError('a partial global batch can only be dealt sample by sample')
    rank_batches = full + (rest > 0)
    per_worker = -(-rank_batches // workers)
    out = np.empty((nodes, ranks, workers, per_worker, batch_size * atom_width), np.int64)
    view = out.reshape(nodes, ranks, workers, per_worker, batch_size, atom_width)
    view = view.transpose(3, 2, 4, 1, 0, 5)  # (batch of worker, worker, slot, rank, node, atom)
    first_node = start % nodes
    shape = (batch_size, ranks, nodes, atom_width)
    whole_rounds = full // workers
    step = max(1, _CHUNK // (workers * global_batch * atom_width))
    for first in range(0, whole_rounds, step):
        last = min(first + step, whole_rounds)
        values = read(first * workers * global_batch, last * workers * global_batch)
        _write_full(view[first:last], values.reshape(last - first, workers, *shape), first_node)
    for batch in range(whole_rounds * workers, full):
        values = read(batch * global_batch, (batch + 1) * global_batch)
        _write_full(view[batch // workers, batch % workers], values.reshape(shape), first_node)
    for batch in range(full, per_worker * workers):
        view[batch // workers, batch % workers] = -1
    if rest:
        _write_last(out, read(full * global_batch, length), first_node, full)
    return out


def global_batches(order: np.ndarray) -> list[np.ndarray]:
    """The samples of each global batch of an epoch order (-1 dropped), in dealing order."""
    nodes, ranks, workers, per_worker, batch = order.shape
    by_batch = order.transpose(3, 2, 0, 1, 4).reshape(per_worker * workers, nodes * ranks * batch)
    batches = [row[row >= 0] for row in by_batch]
    while batches and not len(batches[-1]):
        batches.pop()
    return batches
