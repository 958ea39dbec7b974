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

Every slot's position is index arithmetic on the slot's coordinates (``Dealing.positions``), so
one worker's slots, or a part of them, cost only their own size: nothing epoch-sized is built
unless the whole array is asked for (``deal_positions``).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import numpy as np

from streaming.order.checks import check_choice

__all__ = ['BuiltinPartition', 'Dealing', 'PARTITIONS', 'PartitionFn', 'check_partition',
           'deal_positions', 'dealing_for', 'global_batches', 'register_partition']

_CHUNK = 1 << 22  # Slots computed at a time when a whole array is built.


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
            self.width, columns = 1, np.zeros(0, np.int64)
        else:
            self.width = -(-num_samples // num_rows)
            padding = -self.width % (nodes // num_rows) if num_rows < nodes else 0
            columns = (np.arange(padding, dtype=np.int64) + self.width - padding
                       - nodes // max(num_rows, 1) + 1) % self.width
        self.columns = columns  # Row columns past ``width``: copies of these columns.
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

        Overwrites ``round_index`` (an int64 array), which becomes the result.
        """
        invalid = round_index >= self.rounds if round_index.max(initial=-1) >= self.rounds \
            else None
        j = round_index
        if self.shortfall:
            j *= self.ranks
            j += rank
            if j.max(initial=-1) >= self.count:
                j[:] = np.where(j < self.count, j, (j - self.count + self.first) % self.count)
            j *= self.nodes
            j += node
        else:
            j *= self.ranks * self.nodes
            j += rank * self.nodes + node
        j += self.drop
        if self.few:
            return self._finish(np.remainder(j % self.num_rows, self.num_samples, out=j),
                                invalid)
        if self.num_rows == 1:
            column, row = j, 0
        else:
            column, row = np.divmod(j, self.num_rows)
        if len(self.columns):
            extra = column >= self.width
            column[extra] = self.columns[np.minimum(column[extra] - self.width,
                                                    len(self.columns) - 1)]
        if self.num_rows == 1:
            return self._finish(np.minimum(column, self.num_samples - 1, out=j), invalid)
        start = row * self.num_samples // self.num_rows
        stop = (row + 1) * self.num_samples // self.num_rows
        stop -= start + 1
        positions = np.minimum(column, stop, out=j)
        positions += start
        return self._finish(positions, invalid)

    @staticmethod
    def _finish(positions: np.ndarray, invalid: np.ndarray | None) -> np.ndarray:
        if invalid is not None:
            positions[invalid] = -1
        return positions

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
        # The first run's array, read in (batch, worker, node, rank, slot) order, re-cut.
        nodes, ranks, flat_len, first_batch = self._relaxed
        batch_index, slot = np.divmod(np.arange(start, stop, dtype=np.int64), self.batch_size)
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
        """The whole int64 array of positions, ``shape``."""
        out = np.empty(self.shape, np.int64)
        flat = out.reshape(self.shape[:3] + (-1,))
        for node in range(self.shape[0]):
            for rank in range(self.shape[1]):
                for worker in range(self.shape[2]):
                    for start in range(0, self.slots_per_worker, _CHUNK):
                        stop = min(start + _CHUNK, self.slots_per_worker)
                        flat[node, rank, worker, start:stop] = self.positions(
                            node, rank, worker, start, stop)
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


class BuiltinPartition:
    """``orig`` or ``relaxed``: callable with the reference's signature.

    The engine uses ``Dealing`` (per-slot index arithmetic) for them instead of calling them.
    """

    def __init__(self, algo: str) -> None:
        self.algo = algo
        self.__name__ = self.__qualname__ = f'get_partitions_{algo}'

    def __call__(self, num_samples: int, num_canonical_nodes: int, num_physical_nodes: int,
                 ranks_per_node: int, workers_per_rank: int, batch_size: int,
                 drop_first: int = 0, initial_physical_nodes: int | None = None) -> np.ndarray:
        if num_samples <= drop_first:
            raise ValueError(f'drop_first ({drop_first}) must be less than num_samples '
                             f'({num_samples}).')
        return Dealing(self.algo, num_samples, num_canonical_nodes, num_physical_nodes,
                       ranks_per_node, workers_per_rank, batch_size, drop_first,
                       initial_physical_nodes).full()

    def __reduce__(self) -> tuple:
        return BuiltinPartition, (self.algo,)


BUILTIN_PARTITIONS = ('orig', 'relaxed')
# The partition table; ``streaming.base.partition.algos`` is this dict object.
PARTITIONS: dict[str, PartitionFn] = {name: BuiltinPartition(name) for name in BUILTIN_PARTITIONS}
_lock = threading.Lock()


def register_partition(name: str, fn: PartitionFn) -> PartitionFn:
    """Make ``partition_algo=name`` use ``fn`` (the same as ``streaming.base.partition.algos``)."""
    if name in BUILTIN_PARTITIONS:
        raise ValueError(f'register_partition: {name!r} is built in and cannot be replaced')
    with _lock:
        PARTITIONS[name] = fn
    return fn


def check_partition(*, partition_algo: str, num_canonical_nodes: int, num_physical_nodes: int,
                    initial_physical_nodes: int | None = None) -> None:
    """Raise ValueError unless ``partition_algo`` is registered and the node counts fit it.

    The built-ins need one of the canonical and physical node counts to divide the other, so
    that each physical node reads whole canonical nodes; ``relaxed`` also accepts any node count
    when resuming a run that started on ``initial_physical_nodes`` nodes (same global batches,
    less download locality). A registered partition is left to decide for itself.
    """
    check_choice('partition_algo', partition_algo, tuple(PARTITIONS))
    if not isinstance(PARTITIONS[partition_algo], BuiltinPartition):
        return
    canonical, physical = num_canonical_nodes, num_physical_nodes
    if canonical % physical == 0 or physical % canonical == 0:
        return
    if PARTITIONS[partition_algo].algo == 'relaxed' and initial_physical_nodes is not None:
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
    check_choice('partition_algo', partition_algo, tuple(PARTITIONS))
    fn = PARTITIONS[partition_algo]
    if isinstance(fn, BuiltinPartition):
        return Dealing(fn.algo, num_samples, num_canonical_nodes, num_physical_nodes,
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
