"""Batching methods: the reference's ``stratified``, ``per_stream``, ``device_per_stream``, exactly.

Each stream is resampled on its own, its positions dealt to a topology that depends on the
method and, when shuffling, shuffled with the block size scaled by the stream's proportion,
``int(block_size * proportion)`` (``ids.dealt_ids``); the methods then combine the streams:

* ``stratified``: every global batch takes ``int(proportion * global batch)`` samples from each
  stream, the shortfall one each to the streams with the largest fractional parts (ties to the
  higher stream index, as numpy's argsort of the fractions, reversed, gives). Each stream is
  dealt to one node with batch 1 and read in dealing order; the epoch ends where a stream runs out
  of whole parts.
* ``per_stream``: each stream is dealt to the real topology and cut into global batches; those
  with a -1 are dropped, and the streams' batches are interleaved by a shuffled list of origins.
* ``device_per_stream``: each stream is dealt to ``num_canonical_nodes`` nodes with batch 1;
  physical node ``n`` takes canonical nodes ``n * (C // P)`` on (``C // P`` of them), cuts each
  stream's part into device batches (dropping those with a -1) and interleaves them by shuffled
  origins; nodes are padded with -1 batches to a common multiple of the device count and read
  in turn, a device batch at a time.

The origins are shuffled by ``default_rng(seed + epoch)`` when shuffling with ``balanced``
sampling, else ``default_rng(seed)`` (also unshuffled). Then the first ``sample_in_epoch //
global batch`` global batches are skipped and -1 batches pad the rest to whole rounds of workers.
``random`` is the epoch's ids dealt whole (``ids``).

``BATCHING`` maps a name to ``fn(dataset, world, epoch, sample_in_epoch) -> ids`` of shape
``(nodes, ranks, workers, batches, batch_size)`` (-1: none), as the reference's
``generate_work`` functions; ``streaming.base.batching.batching_methods`` is this dict object, so
a method put there is used by ``StreamingDataset(batching_method=name)``. The four built-ins are
``BuiltinBatching`` entries: ``plan`` runs them itself (and, for ``random``, a worker computes
only its own slots). A registered method is called with the reference's ``World``
(``streaming.base.world.World``, installed by that module through ``set_world_adapter``: this
layer cannot import it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from streaming.order.ids import dealt_ids
from streaming.order.resample import resample
from streaming.order.shuffles import shuffle_traits
from streaming.order.table import AlgorithmTable, Builtin

__all__ = ['BATCHING', 'BATCHING_METHODS', 'BatchingFn', 'BuiltinBatching', 'StreamRun',
           'batching_fn', 'reference_world', 'set_world_adapter', 'stratified_counts',
           'stream_batching']

BATCHING_METHODS = ('random', 'stratified', 'per_stream', 'device_per_stream')


def stratified_counts(stream_proportions: np.ndarray, global_batch: int) -> np.ndarray:
    """Samples per stream in every global batch, for stratified batching, as the reference.

    ``int(proportion * global_batch)`` each (float64); the shortfall goes one each to the streams
    with the largest fractional parts, in the order numpy's (default-kind) argsort of those
    parts, reversed, gives: ties to the higher stream index. A stream left with none is an error.
    """
    exact = global_batch * np.asarray(stream_proportions, np.float64)
    counts = exact.astype(np.int64)
    missing = global_batch - int(counts.sum())
    if missing:
        counts[np.argsort(exact - counts)[::-1][:missing]] += 1
    starved = np.flatnonzero(counts <= 0)
    if len(starved):
        raise ValueError(
            f"batching_method='stratified' gives every stream a fixed share of each global batch, "
            f'but with a global batch of {global_batch} streams {starved.tolist()} would get no '
            'sample (their proportion is too small): raise the batch size or the proportions')
    return counts


@dataclass(frozen=True)
class StreamRun:
    """The settings every stream's order shares (see ``get_epoch_order`` for each)."""

    shard_sizes: np.ndarray
    shard_streams: np.ndarray
    stream_choose: np.ndarray
    stream_proportions: np.ndarray
    epoch: int
    seed: int
    shuffle: bool
    shuffle_algo: str
    block_size: int
    num_canonical_nodes: int
    partition_algo: str
    initial_physical_nodes: int | None
    ranks_per_node: int
    workers_per_rank: int
    sampling_method: str
    sampling_granularity: int

    def stream_order(self, stream: int, method: str, num_nodes: int,
                     batch_size: int) -> np.ndarray:
        """Stream ``stream``'s sample ids dealt to ``num_nodes`` nodes of ``batch_size``."""
        proportion = float(self.stream_proportions[stream])
        block = int(self.block_size * proportion)
        if self.shuffle and block < 1 and (method == 'device_per_stream' or
                                           shuffle_traits(self.shuffle_algo).uses_block_size):
            raise ValueError(
                f'batching_method={method!r} shuffles stream {stream} with a block of '
                f'shuffle_block_size x its proportion = {self.block_size} x {proportion:.6g}, '
                f'which is empty: raise `shuffle_block_size` or the stream\'s proportion')
        drawn = resample(self.shard_sizes, self.shard_streams, self.stream_choose,
                         seed=self.seed, epoch=self.epoch, sampling_method=self.sampling_method,
                         sampling_granularity=self.sampling_granularity, shuffle=self.shuffle,
                         streams=[stream])
        return dealt_ids(drawn, shuffle=self.shuffle, shuffle_algo=self.shuffle_algo,
                        block_size=block, num_canonical_nodes=self.num_canonical_nodes,
                        partition_algo=self.partition_algo, num_physical_nodes=num_nodes,
                        ranks_per_node=self.ranks_per_node,
                        workers_per_rank=self.workers_per_rank, batch_size=batch_size,
                        drop_first=0, initial_physical_nodes=self.initial_physical_nodes,
                        seed=self.seed, epoch=self.epoch)

    def origins_rng(self) -> np.random.Generator:
        """The generator that interleaves the streams' batches."""
        per_epoch = self.shuffle and self.sampling_method == 'balanced'
        return np.random.default_rng(self.seed + self.epoch if per_epoch else self.seed)


def _read_order(dealt: np.ndarray) -> np.ndarray:
    """Dealt ids flattened in the order devices read them (batch, worker, node, rank, slot)."""
    return dealt.transpose(3, 2, 0, 1, 4).ravel()


def _whole_rows(ids: np.ndarray, width: int) -> np.ndarray:
    """The first k rows of ``ids`` cut into rows of ``width`` (-1 padded), k the rows with no -1."""
    padded = np.concatenate([ids, np.full(-len(ids) % width, -1, ids.dtype)])
    rows = padded.reshape(-1, width)
    return rows[:np.count_nonzero(rows.min(axis=1) >= 0)]


def _interleave(parts: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """The rows of all ``parts``, in an order of origins ``rng`` shuffles (each part's in order)."""
    origins = np.repeat(np.arange(len(parts)), [len(part) for part in parts])
    rng.shuffle(origins)
    index = np.empty(len(origins), np.int64)
    index[np.argsort(origins, kind='stable')] = np.arange(len(origins))
    return np.concatenate(parts)[index]


def _stratified(run: StreamRun, global_batch: int) -> np.ndarray:
    parts = stratified_counts(run.stream_proportions, global_batch)
    rows = [_whole_rows(_read_order(run.stream_order(stream, 'stratified', 1, 1)), int(part))
            for stream, part in enumerate(parts.tolist())]
    count = min(len(part) for part in rows)
    return np.concatenate([part[:count] for part in rows], axis=1)


def _per_stream(run: StreamRun, num_nodes: int, batch_size: int, global_batch: int) -> np.ndarray:
    parts = []
    for stream in range(len(run.stream_choose)):
        dealt = run.stream_order(stream, 'per_stream', num_nodes, batch_size)
        rows = _whole_rows(_read_order(dealt), global_batch)
        if not len(rows):
            raise ValueError(f"batching_method='per_stream': stream {stream} cannot fill one "
                             f'global batch of {global_batch} samples (as in the reference, '
                             'such a stream is an error): lower the batch size or raise its '
                             'weight')
        parts.append(rows)
    return _interleave(parts, run.origins_rng())


def _device_per_stream(run: StreamRun, num_nodes: int, batch_size: int,
                       global_batch: int) -> np.ndarray:
    canonical = run.num_canonical_nodes
    dealt = [run.stream_order(stream, 'device_per_stream', canonical, 1)
             for stream in range(len(run.stream_choose))]
    per_node = canonical // num_nodes
    node_parts = []
    for node in range(num_nodes):
        parts = [_whole_rows(_read_order(ids[node * per_node:(node + 1) * per_node]), batch_size)
                 for ids in dealt]
        empty = [stream for stream, part in enumerate(parts) if not len(part)]
        if empty:
            raise ValueError(
                f"batching_method='device_per_stream': on physical node {node} (canonical nodes "
                f'{node * per_node}-{(node + 1) * per_node - 1} of {canonical}) streams {empty} '
                f'cannot fill one device batch of {batch_size}; use fewer canonical nodes '
                '(at least one per physical node) or a smaller batch size')
        node_parts.append(parts)
    num_devices = num_nodes * run.ranks_per_node
    longest = max(sum(len(part) for part in parts) for parts in node_parts)
    longest += num_devices - longest % num_devices
    rng = run.origins_rng()
    nodes = np.full((longest, num_nodes, batch_size), -1, np.int64)
    for node, parts in enumerate(node_parts):
        batches = _interleave(parts, rng)
        nodes[:len(batches), node] = batches
    return nodes.reshape(-1, global_batch)


def stream_batching(method: str, run: StreamRun, *, num_physical_nodes: int,
                          batch_size: int, sample_in_epoch: int) -> np.ndarray:
    """Sample ids ``(nodes, ranks, workers, batches per worker, batch)``, -1 for none."""
    global_batch = num_physical_nodes * run.ranks_per_node * batch_size
    if method == 'stratified':
        batches = _stratified(run, global_batch)
    elif method == 'per_stream':
        batches = _per_stream(run, num_physical_nodes, batch_size, global_batch)
    else:
        batches = _device_per_stream(run, num_physical_nodes, batch_size, global_batch)
    workers = max(run.workers_per_rank, 1)
    batches = batches[sample_in_epoch // global_batch:]
    padding = np.full((-len(batches) % workers, global_batch), -1, np.int64)
    batches = np.concatenate([batches.astype(np.int64, copy=False), padding])
    return batches.reshape(-1, workers, num_physical_nodes, run.ranks_per_node,
                           batch_size).transpose(2, 3, 1, 0, 4)


# ---- the batching table ----------------------------------------------------------------------
BatchingFn = Callable[[Any, Any, int, int], np.ndarray]


class BuiltinBatching(Builtin):
    """A built-in method: callable with the reference's signature (the dataset's own order).

    ``dataset`` is a ``StreamingDataset`` (not imported here: it imports this module).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__name__ = self.__qualname__ = f'generate_work_{name}_batching'
        self.__doc__ = (f"The epoch's ``(nodes, ranks, workers, batches, batch_size)`` sample ids "
                        f'with ``batching_method={name!r}`` (-1: none).')

    @property
    def method(self) -> str:
        """The name, as batching methods call it."""
        return self.name

    def __call__(self, dataset: Any, world: Any, epoch: int,
                 sample_in_epoch: int) -> np.ndarray:
        ours = world.to_world() if hasattr(world, 'to_world') else world
        return dataset._epoch_order(epoch, sample_in_epoch, ours, batching_method=self.name,
                                    builtin=True)


# The batching table; ``streaming.base.batching.batching_methods`` is this object.
BATCHING = AlgorithmTable('batching_method', 'batching method',
                          map(BuiltinBatching, BATCHING_METHODS))
_adapter: list[Callable[[Any], Any]] = []


def set_world_adapter(adapter: Callable[[Any], Any]) -> None:
    """How a registered method receives the world (the reference's ``World.from_world``)."""
    with BATCHING.lock:
        _adapter[:] = [adapter]


def batching_fn(method: str) -> BatchingFn:
    """The method registered as ``method``; ValueError naming ``batching_method`` otherwise."""
    return BATCHING.lookup(method)


def reference_world(world: Any) -> Any:
    """``world`` (a ``streaming.World``) as a registered method expects it."""
    if not _adapter:
        raise ValueError('a registered batching method needs streaming.base.batching imported '
                         '(register it through streaming.base.batching.batching_methods)')
    return _adapter[0](world)
