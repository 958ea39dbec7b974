"""``StreamingDataset``: the glue between streams, the shard cache, the epoch order and torch.

It owns no algorithm of its own: the sample order comes from ``streaming.order`` (pure numpy),
files from ``Stream`` and the storage backends, node-wide state from ``streaming.coord``.
"""

from __future__ import annotations

import bisect
import math
import os
import warnings
import weakref
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Iterator, Sequence

import numpy as np

# torch's DataLoader worker loop seeds numpy.random, importing it in every worker it forks for
# every pass when the parent has not (~8 ms of CPU each); imported once here instead.
import numpy.random  # noqa: F401
from torch.utils.data import IterableDataset

from streaming.cache.prefetch import NodePrefetch, prefetch_arrays
from streaming.cache.shard_cache import LOCAL, ShardCache, cache_arrays
from streaming.dataset.batches import SampleStream, attach_to_fetcher
from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.config import (
    CacheSettings,
    DatasetConfig,
    OrderSettings,
    ResumableLayout,
    StreamSettings,
)
from streaming.dataset.epochs import EpochState, ResumeRecord, epoch_arrays
from streaming.dataset.iteration import iterate_samples, shared_epoch_order
from streaming.dataset.order_store import EpochIds, shared_epoch_ids
from streaming.dataset.stream import Stream
from streaming.dataset.stream_setup import make_streams, set_up_streams
from streaming.indexing import IndexingMixin
from streaming.order import EpochPlan, EpochSpec, IndexIds, plan, resample, shuffle_entry
from streaming.telemetry import WorkerClock
from streaming.world import World

__all__ = ['StreamingDataset']


def _setting(name: str, settable: bool = True) -> property:
    """An attribute for the setting ``name`` of ``dataset.config``.

    Assigning one (as the reference allows) validates the new value through ``DatasetConfig``;
    the settings used only while building the dataset are read-only.
    """

    def set_value(self: StreamingDataset, value: Any) -> None:
        if not settable:
            raise AttributeError(f'{name} is fixed when the dataset is built; pass it to '
                                 f'StreamingDataset(...) instead.')
        self._replace_setting(name, value)

    return property(lambda self: getattr(self.config, name), set_value,
                    doc=f'The ``{name}`` setting (read from ``self.config``).')


def _resumable(name: str) -> property:
    """An attribute for ``name`` of ``dataset.resumable``, which resumption may change."""

    def set_value(self: StreamingDataset, value: Any) -> None:
        setattr(self.resumable, name, value)

    return property(lambda self: getattr(self.resumable, name), set_value,
                    doc=f'``{name}`` as in effect (read from ``self.resumable``).')


class StreamingDataset(IndexingMixin, IterableDataset):
    """An iterable (and randomly indexable) dataset over one or more streams of shards.

    Takes the reference's arguments, with the same defaults, plus ``coordination_timeout``
    (seconds a rank waits for its node's first rank to set up shared state; default 300, or
    ``STREAMING_COORDINATION_TIMEOUT``) and ``world``: a ``World`` for launchers that set
    neither torch.distributed nor the RANK/WORLD_SIZE variables. Every setting is validated
    once into ``self.config`` (a ``DatasetConfig``) and readable as an attribute, as in the
    reference; the canonical node count, seed and first run's node count, which resumption may
    replace, are in ``self.resumable``.
    """

    def __init__(self, *, streams: Sequence[Stream] | None = None, remote: str | None = None,
                 local: str | None = None, split: str | None = None, download_retry: int = 2,
                 download_timeout: float = 60, validate_hash: str | None = None,
                 keep_zip: bool = False, epoch_size: int | str | None = None,
                 predownload: int | None = None, cache_limit: int | str | None = None,
                 sampling_method: str = 'balanced', sampling_granularity: int = 1,
                 partition_algo: str = 'relaxed', num_canonical_nodes: int | None = None,
                 batch_size: int | None = None, shuffle: bool = False, shuffle_algo: str = 'py1e',
                 shuffle_seed: int = 9176, shuffle_block_size: int | None = None,
                 batching_method: str = 'random', allow_unsafe_types: bool = False,
                 replication: int | None = None, stream_name: str = 'stream',
                 stream_config: dict[str, Any] | None = None,
                 coordination_timeout: float | None = None, world: World | None = None) -> None:
        # Each setting goes to the one part of the dataset that reads it.
        order = OrderSettings.from_arguments(
            sampling_method=sampling_method, sampling_granularity=sampling_granularity,
            partition_algo=partition_algo, num_canonical_nodes=num_canonical_nodes,
            batch_size=batch_size, shuffle=shuffle, shuffle_algo=shuffle_algo,
            shuffle_seed=shuffle_seed, shuffle_block_size=shuffle_block_size,
            batching_method=batching_method, replication=replication)
        cache = CacheSettings.from_arguments(cache_limit=cache_limit, predownload=predownload,
                                             batch_size=order.batch_size)
        setup = StreamSettings.from_arguments(
            epoch_size=epoch_size, allow_unsafe_types=allow_unsafe_types,
            download_retry=download_retry, download_timeout=download_timeout,
            validate_hash=validate_hash, keep_zip=keep_zip,
            coordination_timeout=coordination_timeout)
        self.config = DatasetConfig(order, setup, cache)
        self.resumable = ResumableLayout(order.num_canonical_nodes, order.shuffle_seed)
        # Held so that a DataLoader worker started by spawn, unpickling this dataset, has the
        # shuffle registered even if only the parent process registered it.
        self._shuffle_algo = shuffle_entry(order.shuffle_algo)
        self.world = world or World.detect()
        self.streams = make_streams(streams, remote, local, split, stream_name, stream_config)
        self.num_streams = len(self.streams)
        local_workers = self.world.local_world_size
        tables, self._shared = set_up_streams(
            self.streams, split, setup, order.shuffle_seed, self.world, cache.keeps_setup_caches,
            lambda num_shards: {**cache_arrays(num_shards), **epoch_arrays(local_workers),
                                **prefetch_arrays(local_workers)})
        vars(self).update(vars(tables))  # The reference's attribute names (see StreamTables).
        self._starts = self.sample_offset_per_shard.tolist()
        self.length = math.ceil(self.epoch_size / self._parallel_ranks())
        self.cache = ShardCache(self._shared, self.shards, self.streams, self.stream_per_shard,
                                cache.cache_limit)
        self.cache.check_limit()
        if self.world.is_local_leader:
            self.cache.scan_local()
        self._epochs = EpochState(self._shared, self.world.local_rank)
        self._passes = 0
        self._prefetch: NodePrefetch | None = None
        self._fast_read = (type(self).__getitem__ is StreamingDataset.__getitem__ and
                           type(self).get_item is StreamingDataset.get_item)
        self._warn_if_block_capped()
        if self.world.is_local_leader:
            self._predict_epoch()

    # The reference's attributes: settings (read-only) and the values resumption adopts.
    predownload = _setting('predownload')
    sampling_method = _setting('sampling_method')
    sampling_granularity = _setting('sampling_granularity')
    partition_algo = _setting('partition_algo')
    batch_size = _setting('batch_size')
    shuffle = _setting('shuffle')
    shuffle_algo = _setting('shuffle_algo')
    shuffle_block_size = _setting('shuffle_block_size')
    batching_method = _setting('batching_method')
    replication = _setting('replication', settable=False)
    allow_unsafe_types = _setting('allow_unsafe_types', settable=False)
    num_canonical_nodes = _resumable('num_canonical_nodes')
    shuffle_seed = _resumable('shuffle_seed')
    initial_physical_nodes = _resumable('initial_physical_nodes')

    @property
    def cache_limit(self) -> int | None:
        """Bytes the node's cache may hold (None: no limit), as the cache applies it."""
        return self.cache.limit

    @cache_limit.setter
    def cache_limit(self, value: int | str | None) -> None:
        self._replace_setting('cache_limit', value)
        self.cache.limit = self.config.cache.cache_limit
        self.cache.check_limit()

    def _replace_setting(self, name: str, value: Any) -> None:
        """Set one setting, validated with the rest as at construction."""
        self.config = self.config.replace(name, value)

    # ---- the node's downloads (see prefetch) ---------------------------------------------------
    def _node_prefetch(self) -> NodePrefetch | None:
        """This process's view of the node's download schedule; None if nothing is remote."""
        if self.config.batch_size is None or self.cache.states.min() == LOCAL:
            return None
        if self._prefetch is None:
            config = self.config
            ref = weakref.ref(self)

            def order_for(epoch: int, start: int, workers: int) -> np.ndarray:
                dataset = ref()
                if dataset is None:
                    raise FileNotFoundError('the dataset is gone')
                world = replace(dataset.world, worker=0, num_workers=workers)
                return dataset._epoch_order(epoch, start, world)[world.node]

            self._prefetch = NodePrefetch(self._shared, self.cache, self.sample_offset_per_shard,
                                          order_for, config.batch_size, config.cache.lookahead)
        return self._prefetch

    def _predict_epoch(self) -> None:
        """Start the node's downloads for the epoch the next pass will most likely read."""
        prefetch = self._node_prefetch()
        if prefetch is None:
            return
        pending = self._epochs.peek_pending()
        epoch, start = (pending.epoch, pending.sample_in_epoch) if pending else \
            (self._epochs.next_epoch(), 0)
        prefetch.publish(epoch, start, 1)
        prefetch.ensure_running()

    def _parallel_ranks(self) -> int:
        return self.world.world_size // (self.config.replication or 1)

    # ---- sizes ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Samples this rank sees per epoch."""
        return self.length

    @property
    def size(self) -> int:
        """Samples in the underlying shards (before resampling)."""
        return self.num_samples

    @property
    def cache_usage(self) -> int:
        """Bytes the node's cache holds for this dataset."""
        return self.cache.usage

    @property
    def next_epoch(self) -> int:
        """The epoch this rank's next pass over the data will be (the reference's attribute)."""
        return int(self._epochs.next_epoch())

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self._epochs.set_next_epoch(int(epoch))

    @property
    def epoch_seed_change(self) -> bool:
        """Whether the partial draw from each stream changes every epoch (shuffled, balanced)."""
        return self.config.shuffle and self.config.sampling_method == 'balanced'

    @property
    def spanner(self) -> Any:
        """Maps a sample id to (shard id, index within the shard): ``dataset.spanner[i]``."""
        if getattr(self, '_spanner', None) is None:
            from streaming.dataset.spanner import Spanner
            self._spanner = Spanner(self.samples_per_shard)
        return self._spanner

    def resample_streams(self, epoch: int,
                         stream_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(shuffle units, sample ids) that epoch ``epoch`` draws from one stream or all.

        A unit is a run of samples of one shard (a whole copy, or the partial draw); the ids
        are those units' samples, unit after unit.
        """
        config = self.config
        drawn = resample(self.samples_per_shard, self.stream_per_shard, self.stream_choose,
                         seed=self.resumable.shuffle_seed, epoch=epoch,
                         sampling_method=config.sampling_method,
                         sampling_granularity=config.sampling_granularity, shuffle=config.shuffle,
                         streams=None if stream_id is None else [stream_id])
        ids = drawn.small if drawn.small is not None else np.arange(drawn.num_samples)
        return drawn.unit_sizes.astype(np.int64), np.asarray(ids, np.int64)

    def on_exception(self, future: Future) -> None:
        """Re-raise the exception of a finished background task, if it failed.

        Kept for code that hands the dataset's futures to it; our prefetch thread reports its
        errors through the reading thread instead.
        """
        error = future.exception()
        if error is not None:
            raise error

    # ---- random access ------------------------------------------------------------------------
    def get_item(self, sample_id: int, retry: int = 7) -> Any:
        """Sample ``sample_id``, downloading its shard first if needed."""
        shard_id = bisect.bisect_right(self._starts, sample_id) - 1
        return self.cache.read(shard_id, sample_id - self._starts[shard_id], retry)

    def prepare_shard(self, shard_id: int, blocking: bool = True) -> None:
        """Download and decompress a shard into the cache."""
        self.cache.prepare(shard_id, blocking)

    def evict_shard(self, shard_id: int) -> None:
        """Remove a shard from the cache (only shards that can be fetched again)."""
        self.cache.evict(shard_id)

    def evict_coldest_shard(self) -> None:
        """Remove the least recently used shard from the cache."""
        self.cache.evict_coldest()

    # ---- iteration --------------------------------------------------------------------------
    def _canonical_nodes(self) -> int:
        return self.resumable.resolve_canonical_nodes(self.config.shuffle_algo,
                                                      self.world.num_nodes)

    def _spec(self, epoch: int, sample_in_epoch: int, world: World,
              batching_method: str | None = None) -> EpochSpec:
        """What this epoch's order depends on, for this resume point and world."""
        config = self.config
        if config.batch_size is None:
            raise ValueError('StreamingDataset needs batch_size (the per-device batch size of '
                             'your DataLoader) to lay out an epoch for iteration.')
        replication = config.replication or 1
        if world.local_world_size % replication:
            raise ValueError(f'replication={replication} must divide the ranks per node '
                             f'({world.local_world_size}).')
        return EpochSpec(
            shard_sizes=self.samples_per_shard, shard_streams=self.stream_per_shard,
            stream_choose=self.stream_choose, epoch=epoch, seed=self.resumable.shuffle_seed,
            shuffle=config.shuffle, shuffle_algo=config.shuffle_algo,
            shuffle_block_size=self.effective_block_size(),
            num_canonical_nodes=self._canonical_nodes(), partition_algo=config.partition_algo,
            num_physical_nodes=world.num_nodes,
            ranks_per_node=world.local_world_size // replication,
            workers_per_rank=world.num_workers, batch_size=config.batch_size,
            batching_method=batching_method or config.batching_method,
            sampling_method=config.sampling_method,
            sampling_granularity=config.sampling_granularity, sample_in_epoch=sample_in_epoch,
            initial_physical_nodes=self.resumable.initial_physical_nodes,
            stream_proportions=self.proportions)

    def _epoch_order(self, epoch: int, sample_in_epoch: int, world: World,
                     batching_method: str | None = None, builtin: bool = False) -> np.ndarray:
        """The whole ``(nodes, ranks, workers, batches, batch)`` array of sample ids.

        ``builtin``: the method built in under that name, even if the table now holds another.
        """
        spec = self._spec(epoch, sample_in_epoch, world, batching_method)
        return self._whole_order(plan(spec, builtin_batching=builtin), world)

    def _whole_order(self, epoch_plan: EpochPlan, world: World) -> np.ndarray:
        """``epoch_plan``'s whole array, computed once per node (the ids: see order_store)."""
        key = epoch_plan.spec.key()
        if epoch_plan.registered is not None:  # Put in base.batching's table.
            return shared_epoch_order(self._shared, key,
                                      lambda: epoch_plan.run_registered(self, world), 'work')
        if epoch_plan.deals_ids:
            ids = self._epoch_ids(epoch_plan)
            ids.wait(len(ids))
            return epoch_plan.dealt(ids.ids)
        return shared_epoch_order(self._shared, key, epoch_plan.order)

    def _worker_order(self, epoch: int, sample_in_epoch: int, world: World) -> Sequence[int]:
        """This worker's sample ids for the epoch (-1: padding), as a 1-D sliceable sequence."""
        epoch_plan = plan(self._spec(epoch, sample_in_epoch, world))
        rank = world.local_rank // (self.config.replication or 1)
        if epoch_plan.deals_ids:
            return epoch_plan.worker_share(self._epoch_ids(epoch_plan), world.node, rank,
                                           world.worker)
        order = self._whole_order(epoch_plan, world)
        return order[world.node, rank, world.worker].reshape(-1)

    def _epoch_ids(self, epoch_plan: EpochPlan) -> EpochIds | IndexIds:
        """The sample id at each position of the epoch, shared by the node (see order_store)."""
        lazy = epoch_plan.lazy_ids()
        if lazy is not None:  # The ``index`` shuffle: every position computed when read.
            return lazy
        cache_dir = None
        if self.config.cache.keeps_setup_caches and epoch_plan.ids_cacheable:
            try:
                cache_dir = setup_cache_dir(self.streams[0].local_dir)
            except OSError:
                pass  # Kept in the node's shared directory only.
        # This node's rows first (about where its partition starts): not an input of the ids.
        first = self.epoch_size * self.world.node // self.world.num_nodes
        return shared_epoch_ids(self._shared, cache_dir, epoch_plan.id_inputs,
                                lambda: epoch_plan.id_steps(first))

    def effective_block_size(self) -> int:
        """The shuffle block size, capped so one block's shards fit in ``cache_limit``."""
        order = self.config.order
        cap = self.cache.samples_that_fit(self.samples_per_shard) \
            if order.block_size_matters else None
        return order.block_size(self._canonical_nodes(), cap)

    def _warn_if_block_capped(self) -> None:
        wanted = self.config.order.block_size(self._canonical_nodes())
        used = self.effective_block_size()
        if used < wanted:
            warnings.warn(f'shuffle_block_size {wanted} spans more shards than cache_limit='
                          f'{self.cache.limit} bytes can hold; using {used} so that '
                          f'an epoch does not re-download evicted shards over and over.',
                          stacklevel=3)

    def _session_key(self) -> int:
        """A key shared by the workers of one pass over the data (see ``epochs``)."""
        from torch.utils.data import get_worker_info
        info = get_worker_info()
        self._passes += 1  # Counts passes of persistent workers and of the main process.
        base = os.getpid() if info is None else info.seed - info.id
        return hash((base, self._passes)) & ((1 << 63) - 1)

    def __iter__(self) -> Iterator[Any]:
        world = self.world.with_worker()
        epoch, sample_in_epoch, record = self._epochs.begin_session(self._session_key())
        if record is not None:
            self.resumable.adopt(record)
        self.cache.decoded.epoch = epoch  # Decodes counted per epoch (thrashing warned of).
        # This worker's part of the node's shared order, read a chunk at a time; padding (-1)
        # is dropped chunk by chunk while iterating.
        mine = self._worker_order(epoch, sample_in_epoch, world)
        prefetch = self._node_prefetch()  # None when every shard is local.
        prefetcher = None if prefetch is None else prefetch.session(
            epoch, sample_in_epoch, world.local_rank, world.worker, world.num_workers)
        stream = SampleStream(mine, self.sample_offset_per_shard, self.cache, self.__getitem__,
                              self._fast_read, prefetcher, self._worker_clock(world))
        if attach_to_fetcher(self, stream):  # Called by a DataLoader's fetcher: batch at once.
            return stream
        # The cache's read unless a subclass overrides get_item/__getitem__: then that is used.
        read = self.cache.read if self._fast_read else None
        return iterate_samples(mine, self.sample_offset_per_shard, read, self.__getitem__,
                               prefetcher)

    def _worker_clock(self, world: World) -> WorkerClock | None:
        """This worker's telemetry clock, if a ``StreamingDataLoader`` keeps stats for us."""
        stats = getattr(self, '_loader_stats', None)
        return None if stats is None else stats.worker_clock(world.worker)

    # ---- resumption -------------------------------------------------------------------------
    def state_dict(self, num_samples: int, from_beginning: bool) -> dict[str, Any]:
        """Where this epoch stands after ``num_samples`` samples (summed over all ranks)."""
        pending = self._epochs.peek_pending()  # Loaded but not yet iterated: report that.
        epoch, start = (pending.epoch, pending.sample_in_epoch) if pending else \
            self._epochs.current()
        return {'epoch': epoch,
                'sample_in_epoch': num_samples if from_beginning else start + num_samples,
                'num_canonical_nodes': self._canonical_nodes(),
                'shuffle_seed': self.resumable.shuffle_seed,
                'initial_physical_nodes': self.resumable.initial_physical_nodes or
                self.world.num_nodes}

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume from ``obj`` at the next iteration, even if this dataset was iterated."""
        record = ResumeRecord.from_state(obj)
        self.resumable.adopt(record)
        self._epochs.publish_resume(record)
        if self.world.is_local_leader:
            self._predict_epoch()
