"""Partitions: the reference's dealing of positions to devices (``orig``, ``relaxed``), exactly.

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

Every slot's position is index arithmetic on the slot's coordinates (``Dealing.positions``), so
one worker's slots, or a part of them, cost only their own size: nothing epoch-sized is built
unless the whole array is asked for (``deal_positions``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from streaming.order.table import AlgorithmTable, Builtin

__all__ = ['BuiltinPartition', 'Dealing', 'PARTITIONS', 'PartitionFn', 'check_partition',
           'deal_positions', 'dealing_for', 'global_batches', 'register_partition']

_CHUNK = 1 << 22  # Slots computed at a time when a whole array is built.
_READ_ORDER_MAX = 1 << 20  # Epochs up to this many row slots keep their read order whole.


class _Orig:
    """``orig`` dealing of ``num_samples`` positions to ``(nodes, ranks, workers, B, batch)``."""

    def __init__(self, num_samples: int, num_rows: int, nodes: int, ranks: int, workers: int,
                 batch: int, drop_first: int) -> None:
        self.num_samples, self.num_rows = num_samples, num_rows
        self.nodes, self.ranks, self.workers, self.batch = nodes, ranks, workers, batch
        self.few = num_samples < num_rows
        if self.few:
            warnings.warn(f'an epoch of {num_samples} samples over {num_rows} canonical nodes: '
                          'as in the reference, row c reads sample c % samples, so samples '
                          'repeat; use fewer canonical nodes', stacklevel=5)
            self.width = 1
        else:
            self.width = -(-num_samples // num_rows)
        # More physical than canonical nodes: each row is padded to a multiple of the nodes a
        # row is dealt to, with copies of its columns (a row of one column pads with itself).
        padding = -self.width % (nodes // num_rows) if num_rows < nodes else 0
        columns = (np.arange(padding, dtype=np.int64) + self.width - padding
                   - nodes // max(num_rows, 1) + 1) % self.width
        self.columns = columns  # Row columns past ``width``: copies of these columns.
        bounds = np.arange(num_rows + 1, dtype=np.int64) * num_samples // max(num_rows, 1)
        self.row_start, self.row_last = bounds[:-1], bounds[1:] - bounds[:-1] - 1
        # A short epoch's rows, read in turn, as one array: a slot's position is then one
        # lookup instead of a division and two table lookups per slot.
        self.read_order: np.ndarray | None = None
        if self.width == 1 and len(columns) and num_samples:
            # Rows of one sample dealt to more nodes than rows: the reference pads the epoch
            # as a whole, wrapping around it (row c, column j reads (c * width + j) % samples).
            padded = 1 + len(columns)
            self.read_order = ((np.arange(num_rows, dtype=np.int64)[None, :] * padded
                                + np.arange(padded, dtype=np.int64)[:, None])
                               % num_samples).reshape(-1)
        elif not self.few and num_rows * (self.width + len(columns)) <= _READ_ORDER_MAX:
            row_columns = np.concatenate([np.arange(self.width, dtype=np.int64), columns])
            self.read_order = (np.minimum(row_columns[:, None], self.row_last[None, :])
                               + self.row_start[None, :]).reshape(-1)
        self.drop = drop_first - drop_first % nodes
        self.count, uneven = divmod(max(num_rows * (self.width + len(columns)) - self.drop, 0),
                                    nodes)
        if uneven:
            raise ValueError(f'{num_rows} canonical nodes cannot be dealt to {nodes} physical '
                             f'nodes: one count must divide the other')
        self.shortfall = -self.count % ranks if self.count else 0
        self.first = max(self.count - ranks + 1 - self.shortfall, 0)
        self.rounds = (self.count + self.shortfall) // ranks
        per_worker = -(-self.rounds // (workers * batch))
        self.shape = (nodes, ranks, workers, per_worker, batch)

    def at(self, node: np.ndarray | int, rank: np.ndarray | int,
           round_index: np.ndarray) -> np.ndarray:
        """Positions at rounds ``round_index`` of ranks (``(batch * workers + worker) * B + slot``).

        Overwrites ``round_index`` (an int64 array), which may become the result.
        """
        invalid = round_index >= self.rounds if round_index.max(initial=-1) >= self.rounds \
            else None
        j = round_index
        if self.shortfall:
            j *= self.ranks
            j += rank
            over = j >= self.count
            if over.any():
                j[over] = (j[over] - self.count + self.first) % self.count
            j *= self.nodes
            j += node
        else:
            j *= self.ranks * self.nodes
            j += rank * self.nodes + node
        j += self.drop
        if self.read_order is not None:  # Slots past the last round read garbage, then -1.
            return self._finish(np.take(self.read_order, j, mode='clip'), invalid)
        if self.few:
            return self._finish(np.remainder(j % self.num_rows, self.num_samples, out=j),
                                invalid)
        if self.num_rows == 1:
            column = j
        else:  # Floor division by a scalar is numpy's fast path; divmod and % are not.
            column = j // self.num_rows
            j -= column * self.num_rows  # ``j`` is now the row.
        if len(self.columns):
            extra = column >= self.width
            column[extra] = self.columns[np.minimum(column[extra] - self.width,
                                                    len(self.columns) - 1)]
        if self.num_rows == 1:
            return self._finish(np.minimum(column, self.num_samples - 1, out=j), invalid)
        start = self.row_start[j]
        positions = np.minimum(column, self.row_last[j], out=j)
        positions += start
        return self._finish(positions, invalid)

    @staticmethod
    def _finish(positions: np.ndarray, invalid: np.ndarray | None) -> np.ndarray:
        if invalid is not None:
            positions[invalid] = -1
        return positions

    def fill(self, out: np.ndarray) -> None:
        """Write every slot's position into ``out`` (of ``shape``), whole batch rounds at a time.

        Read as ``(nodes, ranks, batches, workers, batch)``, ``out`` lists each rank's rounds in
        order, so all ranks' rounds are computed together in a few array operations, only the
        rounds that exist (a small world costs about what its positions do), ``_CHUNK`` at a
        time.
        """
        nodes, ranks, workers, batches, batch = self.shape
        block = workers * batch  # Rounds per batch index.
        by_round = out.transpose(0, 1, 3, 2, 4)
        if self.read_order is not None:  # Short: the dealing as reshapes of the read order.
            by_node = self.read_order[self.drop:].reshape(self.count, nodes).T
            if self.shortfall:
                extra = (np.arange(self.shortfall, dtype=np.int64) + self.first) % self.count
                by_node = np.concatenate([by_node, by_node[:, extra]], axis=1)
            flat = np.full((nodes, ranks, batches * block), -1, np.int64)
            flat[:, :, :self.rounds] = by_node.reshape(nodes, self.rounds, ranks).transpose(
                0, 2, 1)
            by_round[...] = flat.reshape(nodes, ranks, batches, workers, batch)
            return
        node = np.arange(nodes, dtype=np.int64)[:, None, None]
        rank = np.arange(ranks, dtype=np.int64)[None, :, None]
        step = max(_CHUNK // (nodes * ranks * block), 1)
        for first in range(0, batches, step):
            last = min(first + step, batches)
            chunk = np.empty((nodes, ranks, (last - first) * block), np.int64)
            valid = min(chunk.shape[2], self.rounds - first * block)
            chunk[:, :, valid:] = -1
            rounds = chunk[:, :, :valid]
            rounds[...] = np.arange(first * block, first * block + valid, dtype=np.int64)
            rounds[...] = self.at(node, rank, rounds)
            by_round[:, :, first:last] = chunk.reshape(nodes, ranks, last - first, workers,
                                                       batch)

    def worker_slots(self, node: int, rank: int, worker: int, start: int,
                     stop: int) -> np.ndarray:
        """Positions of slots ``start:stop`` of one worker's ``(B * batch)`` slots."""
        batch, first = self.batch, start // self.batch
        last = -(-stop // batch)
        rounds = np.arange(first, last, dtype=np.int64) * (self.workers * batch) + worker * batch
        rounds = (rounds[:, None] + np.arange(batch, dtype=np.int64)).reshape(-1)
        rounds = rounds[start - first * batch:stop - first * batch]
        return self.at(node, rank, np.ascontiguousarray(rounds))


class Dealing:
    """The epoch position each slot ``(node, rank, worker, batch, index)`` reads, -1 for none.

    ``shape`` is the shape of the whole array; ``positions`` gives any part of one worker's
    slots (flattened over ``batch, index``) without building the rest.
    """

    def __init__(self, partition_algo: str, num_samples: int, num_canonical_nodes: int,
                 num_physical_nodes: int, ranks_per_node: int, workers_per_rank: int,
                 batch_size: int, drop_first: int = 0,
                 initial_physical_nodes: int | None = None) -> None:
        canonical, nodes = num_canonical_nodes, num_physical_nodes
        workers = max(workers_per_rank, 1)
        self.batch_size, self.workers = batch_size, workers
        self._orig: _Orig | None = None
        self._relaxed: tuple[int, int, int, int] | None = None
        if num_samples == 0:
            self.shape: tuple[int, ...] = (nodes, ranks_per_node, workers, 0, batch_size)
            return
        compatible = canonical % nodes == 0 or nodes % canonical == 0
        if partition_algo == 'orig' or initial_physical_nodes is None or compatible:
            self._orig = _Orig(num_samples, canonical, nodes, ranks_per_node, workers,
                               batch_size, drop_first)
            self.shape = self._orig.shape
            return
        global_batch = nodes * ranks_per_node * batch_size
        first_batch, remainder = divmod(global_batch, initial_physical_nodes * ranks_per_node)
        if remainder:
            raise ValueError(
                f'resuming with partition_algo=relaxed needs the global batch ({global_batch}) '
                f'to split evenly over initial_physical_nodes ({initial_physical_nodes}) x '
                f'ranks_per_node ({ranks_per_node})')
        self._orig = _Orig(num_samples, canonical, initial_physical_nodes, ranks_per_node,
                           workers, first_batch, drop_first)
        flat = int(np.prod(self._orig.shape))
        batches = -(-flat // global_batch)
        per_worker = -(-batches // workers)
        self._relaxed = (nodes, ranks_per_node, flat, first_batch)
        self.shape = (nodes, ranks_per_node, workers, per_worker, batch_size)

    @property
    def slots_per_worker(self) -> int:
        return self.shape[3] * self.shape[4]

    def positions(self, node: int, rank: int, worker: int, start: int = 0,
                  stop: int | None = None) -> np.ndarray:
        """int64 positions of slots ``start:stop`` of worker ``(node, rank, worker)``."""
        stop = self.slots_per_worker if stop is None else min(stop, self.slots_per_worker)
        orig = self._orig
        if orig is None or stop <= start:
            return np.full(max(stop - start, 0), -1, np.int64)
        if self._relaxed is None:
            return orig.worker_slots(node, rank, worker, start, stop)
        batch_index, slot = np.divmod(np.arange(start, stop, dtype=np.int64), self.batch_size)
        return self._relaxed_positions(node, rank, worker, batch_index, slot)

    def _relaxed_positions(self, node: np.ndarray | int, rank: np.ndarray | int,
                           worker: np.ndarray | int, batch_index: np.ndarray,
                           slot: np.ndarray) -> np.ndarray:
        """``relaxed`` on a new topology: the first run's array re-cut.

        The first run's array is read in (batch, worker, node, rank, slot) order; ``node``,
        ``rank`` and ``worker`` broadcast over the slots.
        """
        orig = self._orig
        assert orig is not None and self._relaxed is not None
        nodes, ranks, flat_len, first_batch = self._relaxed
        flat = (((batch_index * self.workers + worker) * nodes + node) * ranks + rank) \
            * self.batch_size + slot
        valid = flat < flat_len
        flat = np.where(valid, flat, 0)
        rest, slot0 = np.divmod(flat, first_batch)
        rest, rank0 = np.divmod(rest, ranks)
        rest, node0 = np.divmod(rest, orig.nodes)
        batch0, worker0 = np.divmod(rest, self.workers)
        round_index = batch0 * (self.workers * first_batch) + worker0 * first_batch + slot0
        positions = orig.at(node0, rank0, round_index)
        positions[~valid] = -1
        return positions

    def full(self) -> np.ndarray:
        """The whole int64 array of positions, ``shape``.

        ``orig`` (and ``relaxed`` where it is ``orig``) fills it in rounds (``_Orig.fill``); a
        re-cut ``relaxed`` takes as many workers at a time as fit in ``_CHUNK`` slots. Either
        way a small world costs a few array operations rather than a few per worker.
        """
        out = np.empty(self.shape, np.int64)
        per_worker = self.slots_per_worker
        if self._orig is None or not out.size:
            out.fill(-1)
            return out
        if self._relaxed is None:
            self._orig.fill(out)
            return out
        flat = out.reshape(-1, per_worker)
        if per_worker > _CHUNK:  # One worker at a time, in parts.
            nodes, ranks, workers = self.shape[:3]
            for index in range(len(flat)):
                node, rank, worker = np.unravel_index(index, (nodes, ranks, workers))
                for start in range(0, per_worker, _CHUNK):
                    stop = min(start + _CHUNK, per_worker)
                    flat[index, start:stop] = self.positions(int(node), int(rank), int(worker),
                                                             start, stop)
            return out
        batch_index, slot = np.divmod(np.arange(per_worker, dtype=np.int64), self.batch_size)
        ranks, workers = self.shape[1], self.shape[2]
        group = max(_CHUNK // per_worker, 1)
        for first in range(0, len(flat), group):
            flat_workers = np.arange(first, min(first + group, len(flat)), dtype=np.int64)
            node_rank, worker = np.divmod(flat_workers[:, None], workers)
            node, rank = np.divmod(node_rank, ranks)
            flat[first:first + len(flat_workers)] = self._relaxed_positions(
                node, rank, worker, batch_index, slot)
        return out


class ArrayDealing:
    """A dealing given whole, as a registered partition function returns it."""

    def __init__(self, name: str, positions: np.ndarray, workers: int) -> None:
        array = np.asarray(positions)
        if array.ndim != 5 or array.shape[2] != workers or \
                (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise ValueError(f'partition_algo={name!r} returned an array of shape '
                             f'{array.shape} ({array.dtype}); a partition must return integer '
                             f'positions (nodes, ranks, {workers} workers, batches, batch size)')
        self.array = array.astype(np.int64, copy=False)
        self.shape: tuple[int, ...] = self.array.shape

    @property
    def slots_per_worker(self) -> int:
        return self.shape[3] * self.shape[4]

    def positions(self, node: int, rank: int, worker: int, start: int = 0,
                  stop: int | None = None) -> np.ndarray:
        return self.array[node, rank, worker].reshape(-1)[start:stop].copy()

    def full(self) -> np.ndarray:
        return self.array


# (num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node, workers_per_rank,
#  batch_size, drop_first, initial_physical_nodes) -> positions (nodes, ranks, workers, B, batch).
PartitionFn = Callable[..., np.ndarray]


class BuiltinPartition(Builtin):
    """``orig`` or ``relaxed``: callable with the reference's signature.

    The engine uses ``Dealing`` (per-slot index arithmetic) for them instead of calling them.
    """

    prefix = 'get_partitions_'

    def __call__(self, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                 ranks_per_node: int, workers_per_rank: int, batch_size: int,
                 drop_first: int = 0, initial_physical_nodes: int | None = None) -> np.ndarray:
        if num_samples <= drop_first:
            raise ValueError(f'drop_first ({drop_first}) must be less than num_samples '
                             f'({num_samples}).')
        return Dealing(self.name, num_samples, num_canonical_nodes, num_physical_nodes,
                       ranks_per_node, workers_per_rank, batch_size, drop_first,
                       initial_physical_nodes).full()


# The partition table; ``streaming.base.partition.algos`` is this object.
PARTITIONS = AlgorithmTable('partition_algo', 'partition',
                            map(BuiltinPartition, ('orig', 'relaxed')))


def register_partition(name: str, fn: PartitionFn) -> PartitionFn:
    """Make ``partition_algo=name`` use ``fn`` (the same as ``streaming.base.partition.algos``)."""
    return PARTITIONS.add('register_partition', name, fn)


def check_partition(*, partition_algo: str, num_canonical_nodes: int, num_physical_nodes: int,
                    initial_physical_nodes: int | None = None) -> None:
    """Raise ValueError unless ``partition_algo`` is registered and the node counts fit it.

    The built-ins need one of the canonical and physical node counts to divide the other, so
    that each physical node reads whole canonical nodes; ``relaxed`` also accepts any node count
    when resuming a run that started on ``initial_physical_nodes`` nodes (same global batches,
    less download locality). A registered partition is left to decide for itself.
    """
    if not PARTITIONS.is_builtin(partition_algo):
        return
    canonical, physical = num_canonical_nodes, num_physical_nodes
    if canonical % physical == 0 or physical % canonical == 0:
        return
    if PARTITIONS[partition_algo].name == 'relaxed' and initial_physical_nodes is not None:
        return
    raise ValueError(
        f'num_canonical_nodes ({canonical}) and num_physical_nodes ({physical}) must divide one '
        f'another (e.g. num_canonical_nodes = a multiple of {physical}); otherwise every node '
        'would download every shard. Pass num_canonical_nodes explicitly, or resume with '
        "partition_algo='relaxed' and the first run's initial_physical_nodes.")


def dealing_for(partition_algo: str, num_samples: int, num_canonical_nodes: int,
                num_physical_nodes: int, ranks_per_node: int, workers_per_rank: int,
                batch_size: int, drop_first: int = 0,
                initial_physical_nodes: int | None = None) -> Dealing | ArrayDealing:
    """Which epoch position each slot reads, by the partition registered as ``partition_algo``."""
    fn = PARTITIONS.lookup(partition_algo)
    if isinstance(fn, BuiltinPartition):
        return Dealing(fn.name, num_samples, num_canonical_nodes, num_physical_nodes,
                       ranks_per_node, workers_per_rank, batch_size, drop_first,
                       initial_physical_nodes)
    return ArrayDealing(partition_algo, fn(num_samples, num_canonical_nodes, num_physical_nodes,
                                           ranks_per_node, workers_per_rank, batch_size,
                                           drop_first, initial_physical_nodes),
                        max(workers_per_rank, 1))


def deal_positions(partition_algo: str, num_samples: int, num_canonical_nodes: int,
                   num_physical_nodes: int, ranks_per_node: int, workers_per_rank: int,
                   batch_size: int, drop_first: int = 0,
                   initial_physical_nodes: int | None = None) -> np.ndarray:
    """Positions ``(nodes, ranks, workers, batches per worker, batch)``, -1 for none."""
    return dealing_for(partition_algo, num_samples, num_canonical_nodes, num_physical_nodes,
                       ranks_per_node, workers_per_rank, batch_size, drop_first,
                       initial_physical_nodes).full()


def global_batches(order: np.ndarray) -> list[np.ndarray]:
    """The samples of each global batch of an epoch order (-1 dropped), in dealing order."""
    nodes, ranks, workers, per_worker, batch = order.shape
    by_batch = order.transpose(3, 2, 0, 1, 4).reshape(per_worker * workers, nodes * ranks * batch)
    batches = [row[row >= 0] for row in by_batch]
    while batches and not len(batches[-1]):
        batches.pop()
    return batches
