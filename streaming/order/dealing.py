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

import warnings

import numpy as np

__all__ = ['Dealing', 'deal_positions']

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


def deal_positions(partition_algo: str, num_samples: int, num_canonical_nodes: int,
                   num_physical_nodes: int, ranks_per_node: int, workers_per_rank: int,
                   batch_size: int, drop_first: int = 0,
                   initial_physical_nodes: int | None = None) -> np.ndarray:
    """Positions ``(nodes, ranks, workers, batches per worker, batch)``, -1 for none."""
    return Dealing(partition_algo, num_samples, num_canonical_nodes, num_physical_nodes,
                   ranks_per_node, workers_per_rank, batch_size, drop_first,
                   initial_physical_nodes).full()
