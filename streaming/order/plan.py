"""The epoch's order as one typed plan: ``plan(EpochSpec(...)) -> EpochPlan``, the one entry point.

``EpochSpec`` is everything an epoch's order depends on (the shards and the streams' draws, the
seed and epoch, the shuffle, partition and batching settings, the world, the resume point),
validated once when it is made. ``plan`` turns it into an ``EpochPlan``: what a reader of the
epoch needs, whichever shuffle, partition and batching method is asked for, built in or
registered:

- with the built-in ``random`` batching (``deals_ids``), the sample id at each position of the
  epoch (``id_steps``, the expensive part, computed once per node and keyed by ``id_inputs``;
  or ``lazy_ids`` with the ``index`` shuffle, computed position by position when read) dealt to
  devices by index arithmetic (``dealing``, ``worker_share``: nothing epoch-sized per worker);
- with another built-in method, the whole array (``order``);
- with a method registered in ``streaming.base.batching.batching_methods``, that function
  (``run_registered``), called with the dataset as in the reference.

Where the ids and arrays are kept (shared memory, the set-up cache) is the dataset's business;
this module is pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator

import numpy as np

from streaming.order.batching import (
    BATCHING_METHODS,
    BuiltinBatching,
    StreamRun,
    batching_fn,
    reference_world,
    stream_batching,
)
from streaming.order.checks import check_choice, check_int
from streaming.order.ids import dealt_array, epoch_id_steps, take_ids
from streaming.order.partition import ArrayDealing, Dealing, check_partition, dealing_for
from streaming.order.resample import whole_units
from streaming.order.sampling import SAMPLING_METHODS
from streaming.order.shuffles import BuiltinShuffle, get_shuffle, shuffle_block_size_in_effect
from streaming.order.shuffles.index import NAME as INDEX_SHUFFLE
from streaming.order.shuffles.index import IndexOrder
from streaming.order.shuffles.rows import FinalParts

__all__ = ['EpochPlan', 'EpochSpec', 'IndexIds', 'WorkerOrder', 'get_epoch_order', 'plan']

# The inputs of the epoch's sample ids (``id_steps``): not the world, nor the resume point.
_ID_FIELDS = ('shard_sizes', 'shard_streams', 'stream_choose', 'epoch', 'seed', 'shuffle',
              'shuffle_algo', 'num_canonical_nodes', 'sampling_method', 'sampling_granularity')


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


@dataclass(frozen=True, eq=False)
class EpochSpec:
    """Everything one epoch's order depends on, validated when made (ValueError names the field).

    Args:
        shard_sizes: samples in each shard, all streams' shards concatenated.
        shard_streams: the stream each shard belongs to.
        stream_choose: samples to draw from each stream this epoch (see ``apply_weights``).
        epoch: the epoch number; with ``seed`` it selects the draw and the order.
        seed: the run's seed; the same (seed, epoch) always gives the same order.
        shuffle: whether to shuffle (else units are read in dataset order).
        shuffle_algo: a registered shuffle (see ``streaming.order.shuffles``).
        shuffle_block_size: window of the block shuffles; None: the default
            (``shuffle_block_size_in_effect``).
        num_canonical_nodes: the run's fixed node count that the order is built for.
        partition_algo: ``orig``, ``relaxed`` or a registered partition.
        num_physical_nodes: nodes of this run.
        ranks_per_node: devices per node (that read distinct samples).
        workers_per_rank: dataloader workers per device (0, loading in the main process, counts
            as one).
        batch_size: samples per device batch.
        batching_method: ``random``, ``stratified``, ``per_stream``, ``device_per_stream`` or
            one put in ``streaming.base.batching.batching_methods``.
        sampling_method: ``balanced`` (a new partial draw each epoch) or ``fixed``.
        sampling_granularity: partial draws take samples from shards in runs of this many.
        sample_in_epoch: samples of this epoch already consumed (in global-batch order) to skip.
        initial_physical_nodes: node count of the run being resumed, if any.
        stream_proportions: each stream's ``proportion`` (see ``sampling.stream_proportions``);
            sets the non-random methods' per-stream counts. Default: each stream's share of
            ``stream_choose``.

    """

    shard_sizes: np.ndarray
    shard_streams: np.ndarray
    stream_choose: np.ndarray
    epoch: int
    seed: int
    shuffle: bool
    num_canonical_nodes: int
    batch_size: int
    shuffle_algo: str = 'py1e'
    shuffle_block_size: int | None = None
    partition_algo: str = 'relaxed'
    num_physical_nodes: int = 1
    ranks_per_node: int = 1
    workers_per_rank: int = 1
    batching_method: str = 'random'
    sampling_method: str = 'balanced'
    sampling_granularity: int = 1
    sample_in_epoch: int = 0
    initial_physical_nodes: int | None = None
    stream_proportions: np.ndarray | None = None

    def __post_init__(self) -> None:
        sizes = _as_counts('shard_sizes', self.shard_sizes)
        streams = _as_counts('shard_streams', self.shard_streams)
        choose = _as_counts('stream_choose', self.stream_choose)
        if len(streams) != len(sizes):
            raise ValueError(f'`shard_streams` has {len(streams)} entries but `shard_sizes` has '
                             f'{len(sizes)}')
        if len(streams) and streams.max() >= len(choose):
            raise ValueError(f'`shard_streams` names stream {streams.max()} but `stream_choose` '
                             f'has only {len(choose)} streams')
        for name, minimum in (('epoch', 0), ('seed', 0), ('num_canonical_nodes', 1),
                              ('num_physical_nodes', 1), ('ranks_per_node', 1),
                              ('workers_per_rank', 0), ('batch_size', 1),
                              ('sampling_granularity', 1), ('sample_in_epoch', 0)):
            check_int(name, getattr(self, name), minimum)
        if self.shuffle_block_size is not None:
            check_int('shuffle_block_size', self.shuffle_block_size, 1)
        if self.initial_physical_nodes is not None:
            check_int('initial_physical_nodes', self.initial_physical_nodes, 1)
        get_shuffle(self.shuffle_algo)  # Raises for an unregistered name, shuffling or not.
        batching_fn(self.batching_method)
        check_choice('sampling_method', self.sampling_method, SAMPLING_METHODS)
        check_partition(partition_algo=self.partition_algo,
                        num_canonical_nodes=self.num_canonical_nodes,
                        num_physical_nodes=self.num_physical_nodes,
                        initial_physical_nodes=self.initial_physical_nodes)
        proportions = _proportions(self.stream_proportions, choose)
        for name, value in (('shard_sizes', sizes), ('shard_streams', streams),
                            ('stream_choose', choose), ('stream_proportions', proportions),
                            ('shuffle', bool(self.shuffle))):
            object.__setattr__(self, name, value)

    @property
    def block_size(self) -> int:
        """The shuffle block size in effect (the given one, else the default)."""
        return shuffle_block_size_in_effect(self.shuffle_block_size, self.num_canonical_nodes)

    def key(self) -> dict[str, Any]:
        """Every field, arrays as bytes: equal keys, equal orders."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(value: Any) -> Any:
    return value.tobytes() if isinstance(value, np.ndarray) else value


class IndexIds:
    """The ``index`` shuffle's sample ids, computed as they are read: nothing epoch-sized.

    Stands where the node's stored ids would (``ids[positions]``, ``wait``, ``len``).
    """

    def __init__(self, order: IndexOrder) -> None:
        self.ids = order

    def __len__(self) -> int:
        return len(self.ids)

    def wait(self, count: int) -> None:
        """Every id is ready: nothing to wait for."""

    def wait_positions(self, positions: np.ndarray) -> None:
        """Every id is ready: nothing to wait for."""


class WorkerOrder:
    """One worker's sample ids for the epoch (``-1``: none), produced a slice at a time.

    Behaves as the 1-D array ``order[node, rank, worker].reshape(-1)`` for ``len`` and slices.
    ``ids`` is the epoch's ids as stored: ``ids.ids[positions]`` and ``ids.wait_positions``.
    """

    def __init__(self, ids: Any, dealing: Dealing | ArrayDealing, node: int, rank: int,
                 worker: int) -> None:
        self.ids, self.dealing = ids, dealing
        self.node, self.rank, self.worker = node, rank, worker

    def __len__(self) -> int:
        return self.dealing.slots_per_worker

    def __getitem__(self, item: slice) -> np.ndarray:
        if not isinstance(item, slice):
            raise TypeError('WorkerOrder supports slices only')
        start, stop, step = item.indices(len(self))
        if step != 1:
            raise TypeError('WorkerOrder supports slices with step 1 only')
        positions = self.dealing.positions(self.node, self.rank, self.worker, start, stop)
        self.ids.wait_positions(positions)
        return take_ids(self.ids.ids, positions)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


@dataclass(frozen=True)
class EpochPlan:
    """How to produce the epoch ``spec`` describes (see the module's docstring).

    ``registered`` is the user's batching function when the method is not a built-in one.
    """

    spec: EpochSpec
    registered: Callable[..., np.ndarray] | None = None

    @property
    def deals_ids(self) -> bool:
        """Whether the order is the epoch's ids dealt to slots (the built-in ``random``)."""
        return self.registered is None and self.spec.batching_method == 'random'

    @property
    def id_inputs(self) -> dict[str, Any]:
        """What the epoch's ids depend on: the key they are stored and shared under."""
        inputs = {name: getattr(self.spec, name) for name in _ID_FIELDS}
        inputs['block_size'] = self.spec.block_size
        return inputs

    @property
    def ids_cacheable(self) -> bool:
        """Whether the ids may be kept across jobs: a registered shuffle may change."""
        return isinstance(get_shuffle(self.spec.shuffle_algo), BuiltinShuffle)

    def id_steps(self, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
        """The epoch's sample ids a part at a time (see ``ids.epoch_id_steps``)."""
        return epoch_id_steps(**self.id_inputs, first_position=first_position)

    def lazy_ids(self) -> IndexIds | None:
        """The ids computed when read (``index`` shuffle, streams drawn whole); else None.

        A partial draw is the reference's, which costs O(samples): then the ids are stored.
        """
        spec = self.spec
        fn = get_shuffle(spec.shuffle_algo)
        if not spec.shuffle or not isinstance(fn, BuiltinShuffle) or fn.name != INDEX_SHUFFLE:
            return None
        units = whole_units(spec.shard_sizes, spec.shard_streams, spec.stream_choose)
        if units is None:
            return None
        sizes, first_ids = units
        return IndexIds(IndexOrder(sizes, spec.num_canonical_nodes, spec.seed, spec.epoch,
                                   spec.block_size, unit_values=first_ids))

    def dealing(self, num_samples: int) -> Dealing | ArrayDealing:
        """Which epoch position each device slot reads."""
        spec = self.spec
        return dealing_for(spec.partition_algo, num_samples, spec.num_canonical_nodes,
                           spec.num_physical_nodes, spec.ranks_per_node, spec.workers_per_rank,
                           spec.batch_size, spec.sample_in_epoch, spec.initial_physical_nodes)

    def worker_share(self, ids: Any, node: int, rank: int, worker: int) -> WorkerOrder:
        """One worker's sample ids, read from the epoch's stored ``ids`` a slice at a time."""
        return WorkerOrder(ids, self.dealing(len(ids)), node, rank, worker)

    def dealt(self, ids: np.ndarray) -> np.ndarray:
        """The whole ``(nodes, ranks, workers, batches, batch)`` array of the epoch's ``ids``."""
        return dealt_array(ids, self.dealing(len(ids)))

    def order(self) -> np.ndarray:
        """The whole ``(nodes, ranks, workers, batches, batch)`` array, -1 where none.

        Computed here for the built-in methods; a registered one needs ``run_registered``.
        """
        spec = self.spec
        if self.registered is not None:
            raise ValueError(f'batching_method={spec.batching_method!r} is registered: its '
                             f'order comes from run_registered(dataset, world)')
        if spec.batching_method != 'random':
            run = StreamRun(spec.shard_sizes, spec.shard_streams, spec.stream_choose,
                            spec.stream_proportions, spec.epoch, spec.seed, spec.shuffle,
                            spec.shuffle_algo, spec.block_size, spec.num_canonical_nodes,
                            spec.partition_algo, spec.initial_physical_nodes,
                            spec.ranks_per_node, spec.workers_per_rank, spec.sampling_method,
                            spec.sampling_granularity)
            return stream_batching(spec.batching_method, run,
                                   num_physical_nodes=spec.num_physical_nodes,
                                   batch_size=spec.batch_size, sample_in_epoch=spec.sample_in_epoch)
        steps = self.id_steps()
        ids: np.ndarray = next(steps)  # type: ignore[assignment]
        for _ in steps:
            pass
        return self.dealt(ids)

    def run_registered(self, dataset: Any, world: Any) -> np.ndarray:
        """The registered method's array for ``dataset`` in ``world`` (a ``streaming.World``)."""
        assert self.registered is not None
        return self.registered(dataset, reference_world(world), self.spec.epoch,
                               self.spec.sample_in_epoch)


def plan(spec: EpochSpec, *, builtin_batching: bool = False) -> EpochPlan:
    """How to produce ``spec``'s epoch: the one entry point of the order.

    ``builtin_batching``: use the method built in under ``spec.batching_method`` even if the
    table now holds another (a built-in called through the reference's signature).
    """
    method = spec.batching_method
    fn = batching_fn(method)
    if builtin_batching or isinstance(fn, BuiltinBatching):
        check_choice('batching_method', method, BATCHING_METHODS)
        return EpochPlan(spec)
    return EpochPlan(spec, fn)


def get_epoch_order(*, shard_sizes: np.ndarray, shard_streams: np.ndarray,
                    stream_choose: np.ndarray, epoch: int, seed: int, shuffle: bool,
                    num_canonical_nodes: int, batch_size: int, **settings: Any) -> np.ndarray:
    """The epoch's global sample ids for every (node, rank, worker, batch, slot), in one call.

    Takes ``EpochSpec``'s fields as keywords (the rest default as there) and runs a built-in
    batching method. Returns an int64 array ``(nodes, ranks, workers, batches per worker,
    batch_size)`` of sample ids (indices into all shards' samples concatenated), -1 where there
    is none: worker ``(n, r, w)`` yields ``order[n, r, w]`` in order, skipping -1. With the
    reference's shuffles and partitions it is the reference's order, sample for sample.
    """
    spec = EpochSpec(shard_sizes=shard_sizes, shard_streams=shard_streams,
                     stream_choose=stream_choose, epoch=epoch, seed=seed, shuffle=shuffle,
                     num_canonical_nodes=num_canonical_nodes, batch_size=batch_size, **settings)
    return plan(spec, builtin_batching=True).order()
