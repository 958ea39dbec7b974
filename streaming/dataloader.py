"""``StreamingDataLoader``: a torch DataLoader that can checkpoint where it is in the epoch."""

from __future__ import annotations

import inspect
import itertools
import os
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Iterator, NamedTuple

import torch
from torch.utils.data import BatchSampler, DataLoader, default_collate

try:  # The sampler torch gives an IterableDataset; a torch without it keeps its own batches.
    from torch.utils.data.dataloader import _InfiniteConstantSampler
except ImportError:
    _InfiniteConstantSampler = None
try:  # The iterators' base, whose __next__ ``_steps`` takes apart; without it, next() as is.
    from torch.utils.data.dataloader import _BaseDataLoaderIter as _BaseIterator
except ImportError:
    _BaseIterator = None

from streaming.dataset.dataset import StreamingDataset
from streaming.dataset.handoff import release_dead_workers
from streaming.telemetry import LoaderStats

__all__ = ['StreamingDataLoader']

GROUP_BYTES = 1 << 20  # Samples' bytes per group of batches a worker sends at once.
MAX_GROUP = 16  # Batches per group at most.


def _batch_len(batch: Any) -> int:
    """The number of samples in a collated batch."""
    if isinstance(batch, Mapping):
        return _batch_len(next(iter(batch.values())))
    if isinstance(batch, torch.Tensor):
        return len(batch)
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        return len(first) if isinstance(first, (torch.Tensor, list, tuple, Mapping)) else \
            len(batch)
    return len(batch)


class _Counted(NamedTuple):
    """A collated batch and the number of samples it was made of.

    A namedtuple, so that ``pin_memory`` pins the batch inside it.
    """

    count: int
    batch: Any


class _Group(NamedTuple):
    """Consecutive batches of one worker's stream that crossed to the main process as one item.

    ``round``: how many groups that worker sent before this one in the pass (torch hands out
    items to the workers in turn, so the groups of one round arrive one per worker, in worker
    order). A namedtuple, so that ``pin_memory`` pins the batches inside it.
    """

    worker: int
    round: int
    counts: list[int]
    batches: list[Any]
    last: bool  # The worker's last group of the pass.


class _CountingCollate:
    """Wraps a ``collate_fn`` to record how many samples each batch holds, whatever it returns."""

    def __init__(self, collate_fn: Callable[[list], Any]) -> None:
        self.collate_fn = collate_fn
        # The dataset's batch fetch (streaming.dataset.batches) collates some batches itself:
        # it looks through this wrapper at ``inner_collate`` and tags its batches with
        # ``counted``.
        self.inner_collate = collate_fn

    def __call__(self, samples: list) -> _Counted:
        return _Counted(len(samples), self.collate_fn(samples))

    @staticmethod
    def counted(count: int, batch: Any) -> _Counted:
        return _Counted(count, batch)

    @staticmethod
    def grouped(worker: int, round: int, counts: list[int], batches: Any,
                last: bool) -> _Group:
        return _Group(worker, round, counts, batches, last)


class _GroupIndex(list[None]):
    """A batch's "indices" that also ask the worker for ``group`` batches at once."""

    group = 1


class _ConstantBatches:
    """The batch "indices" of an ``IterableDataset``: ``[None] * batch_size``, forever.

    What torch's ``BatchSampler`` over its ``_InfiniteConstantSampler`` yields, without a
    Python step per sample in the main process (256 per batch of 2 KiB tokens): the fetcher
    only counts these. One list object, never modified by torch or the fetch; ``group`` above
    1 asks the dataset's fetch for groups of batches (see ``StreamingDataLoader``).
    """

    def __init__(self, batch_size: int, group: int = 1) -> None:
        self.batch: list[None] = [None] * batch_size
        if group > 1:
            grouped = _GroupIndex(self.batch)
            grouped.group = group
            self.batch = grouped

    def __iter__(self) -> Iterator[list]:
        return itertools.repeat(self.batch)


def _reuses_workers(args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether a loader made with these arguments keeps its workers between whole epochs.

    Only over a ``StreamingDataset``, with workers, no ``worker_init_fn`` and
    ``persistent_workers`` not chosen (see ``StreamingDataLoader``);
    ``STREAMING_REUSE_WORKERS=0`` turns it off.
    """
    if os.environ.get('STREAMING_REUSE_WORKERS', '1') == '0':
        return False
    try:
        bound = _LOADER_SIGNATURE.bind(None, *args, **kwargs).arguments
    except TypeError:  # torch reports the bad arguments itself.
        return False
    return (isinstance(bound.get('dataset'), StreamingDataset) and
            (bound.get('num_workers') or 0) > 0 and bound.get('worker_init_fn') is None and
            'persistent_workers' not in bound)


_LOADER_SIGNATURE = inspect.signature(DataLoader.__init__)


def _profiler_running() -> bool:
    return torch._C._autograd._profiler_enabled()


def _steps(iterator: Any) -> Iterator[Any]:
    """What ``next(iterator)`` gives, item after item (``iterator``: torch's, of a loader).

    torch's ``__next__`` wraps each step in a ``record_function`` for its profiler: about a
    tenth of the main process's CPU per batch of small samples (docs/benchmarks.md, issue 31).
    While no profiler runs, and nothing asked the dataset's length (torch then checks the count
    against it), a step is what that ``__next__`` does without it: ``_next_data``, counted.
    """
    step = getattr(iterator, '_next_data', None)
    if step is None or _BaseIterator is None or \
            type(iterator).__next__ is not _BaseIterator.__next__:
        yield from iterator
        return
    while True:
        try:
            if _profiler_running() or iterator._sampler_iter is None or \
                    iterator._IterableDataset_len_called is not None:
                item = next(iterator)
            else:
                item = step()
                iterator._num_yielded += 1
        except StopIteration:
            return
        yield item


def _ungrouped(items: Iterator[Any], iterator: Any, workers: int) -> Iterator[Any]:
    """The batches of ``items`` in the order torch would have given them one by one.

    torch hands batch requests to the ``workers`` in turn, so batch by batch it yields each
    active worker's next batch in worker order: sorted by (batch of that worker's pass, worker).
    A worker's round ``r`` group holds its batches from ``2**r - 1`` on (sizes 1, 2, 4, ... up
    to the loader's group; the same for every worker), so each group's first batch comes next
    as it arrives, and the rest of a round's batches once every worker still reading sent its
    group of the round (or the next round starts, or the epoch ends): batch ``i`` of each
    group, in worker order, for each ``i``.
    """
    held: list[list[_Counted]] = []  # This round's groups not yielded whole, as they arrived.
    current, expected = -1, set(range(workers))
    arrived: set[int] = set()  # Workers whose group of this round came.
    ending: set[int] = set()  # Those of them that sent their last.
    for item in items:
        if type(item) is not _Group:
            yield from _rest_of_round(held, iterator)
            held = []
            yield item
            continue
        if item.round != current:  # Workers missing from the last round had no more batches.
            yield from _rest_of_round(held, iterator)
            if current >= 0:
                expected = arrived - ending
            held, current, arrived, ending = [], item.round, set(), set()
        batches = [_Counted(count, batch) for count, batch in zip(item.counts, item.batches)]
        iterator._num_yielded += len(batches) - 1  # As torch counts its steps: in batches.
        held.append(batches)
        arrived.add(item.worker)
        if item.last:
            ending.add(item.worker)
        yield batches[0]
        if arrived >= expected:  # No other group of this round can come.
            yield from _rest_of_round(held, iterator)
            held = []
    yield from _rest_of_round(held, iterator)


def _rest_of_round(held: list[list[_Counted]], iterator: Any) -> Iterator[_Counted]:
    """All but the first batch of each of a round's groups, batch by batch, worker by worker."""
    for position in range(1, max(map(len, held), default=0)):
        for batches in held:
            if position < len(batches):
                if _profiler_running():  # A step each, as torch's __next__ records them.
                    with torch.autograd.profiler.record_function(iterator._profile_name):
                        pass
                yield batches[position]


def _attributes(dataset: Any) -> dict[str, int]:
    """Which object each attribute of ``dataset`` is bound to (to see one rebound)."""
    return {name: id(value) for name, value in vars(dataset).items()}


def _shut_down(iterator: Any) -> None:
    """Stop ``iterator``'s workers and reap them."""
    shutdown = getattr(iterator, '_shutdown_workers', None)
    if shutdown is None:
        return
    shutdown()
    # torch terminates a worker that does not stop at once without reaping it; an unreaped
    # worker still looks alive, and its ring would stay mapped.
    for worker in getattr(iterator, '_workers', ()):
        worker.join(timeout=5)


class StreamingDataLoader(DataLoader):
    """A DataLoader that counts the samples it yields, so ``state_dict()`` can resume mid-epoch.

    Samples are counted as the collate function receives them, so the count is right whatever
    ``collate_fn`` returns (``collate_fn=list`` included).

    Over a ``StreamingDataset`` with workers, no ``worker_init_fn`` and ``persistent_workers``
    left unset, the workers of an epoch read to its end serve the next epoch too (torch's
    ``persistent_workers``) instead of being forked again: starting a pair of workers costs
    about as much as reading a few hundred MB (docs/dataset.md, "Workers kept between
    epochs"). The dataset coordinates epochs and resumption through the node's shared
    directory, so the samples are the same either way. Fresh workers are started as before
    when an epoch was broken off (or failed), when an attribute of the dataset was rebound
    since the workers were made, and for a second iteration started while one is running.
    """

    def __init__(self, *args: Any, log_every: int | None = None, **kwargs: Any) -> None:
        reuse = _reuses_workers(args, kwargs)
        if reuse:
            kwargs['persistent_workers'] = True
        super().__init__(*args, **kwargs)
        self._reuse_workers = reuse
        self._workers_saw: dict[str, int] | None = None  # The dataset when they were made.
        self._running = 0  # Iterations started and not ended.
        self.num_samples_yielded = 0
        # Data-stall telemetry (streaming.telemetry); log_every=N logs a line every N steps.
        self.stats = LoaderStats(self.num_workers, log_every)
        dataset = self.dataset
        if isinstance(dataset, StreamingDataset):
            dataset._loader_stats = self.stats
            self.stats.egress_source = dataset.cache.egress
        if isinstance(dataset, StreamingDataset) and self.batch_size is not None and \
                dataset.batch_size is not None and dataset.batch_size != self.batch_size:
            warnings.warn(f'StreamingDataset batch_size={dataset.batch_size} differs from the '
                          f'DataLoader batch_size={self.batch_size}: the dataset lays out each '
                          f'epoch (and resumes) in batches of its own batch_size, so pass the '
                          f'same per-device batch size to both.', stacklevel=2)
        if self._auto_collation and not isinstance(self.collate_fn, _CountingCollate):
            self.collate_fn = _CountingCollate(self.collate_fn)

    @property
    def _index_sampler(self) -> Any:
        sampler = super()._index_sampler
        if type(sampler) is BatchSampler and \
                type(sampler.sampler) is _InfiniteConstantSampler:
            return _ConstantBatches(sampler.batch_size, self._batches_per_group())
        return sampler

    def _batches_per_group(self) -> int:
        """How many batches a worker sends at most as one item (about ``GROUP_BYTES``).

        At most ``MAX_GROUP``; 1 (torch's own protocol) unless over a ``StreamingDataset``
        without a ``cache_limit`` (workers reading a group ahead would change which shards are
        evicted, and so the egress), with workers, default collation, no ``timeout`` and
        batches in order. Each item torch
        moves between processes has a fixed CPU cost (pickles, queues, pipe writes, wake-ups):
        grouping small batches spreads it over several (docs/dataset.md, "How batches travel
        from the workers"). The estimate is from the index (shard bytes per sample), the same
        in every worker.
        ``STREAMING_BATCH_GROUPS=0`` turns it off.
        """
        dataset, collate = self.dataset, self.collate_fn
        if (os.environ.get('STREAMING_BATCH_GROUPS', '1') == '0' or not self.num_workers or
                self.timeout or not getattr(self, 'in_order', True) or
                not isinstance(dataset, StreamingDataset) or self.batch_size is None or
                not isinstance(collate, _CountingCollate) or
                collate.inner_collate is not default_collate or dataset.cache.evicts):
            return 1
        samples = int(dataset.samples_per_shard.sum())
        if not samples:
            return 1
        batch_bytes = int(dataset.cache.max_sizes().sum()) / samples * self.batch_size
        return max(1, min(MAX_GROUP, int(GROUP_BYTES // max(batch_bytes, 1))))

    def _iterator_for_epoch(self) -> tuple[Any, bool]:
        """The torch iterator for this epoch, and whether its workers are kept after it."""
        if not self._reuse_workers:
            return super().__iter__(), False
        if self._running:  # Another iteration uses the kept workers: fresh ones for this one.
            return self._get_iterator(), False
        if self._iterator is not None and _attributes(self.dataset) != self._workers_saw:
            _shut_down(self._iterator)  # Their copy of the dataset is out of date.
            self._iterator = None
        if self._iterator is None:
            self._workers_saw = _attributes(self.dataset)
        return super().__iter__(), True

    def __iter__(self) -> Iterator[Any]:
        self.num_samples_yielded = 0
        iterator, keep = self._iterator_for_epoch()
        self._running += 1
        batches = self.stats.timed(_ungrouped(_steps(iterator), iterator, self.num_workers))
        whole = False
        try:
            for batch in batches:
                if isinstance(batch, _Counted):
                    self.num_samples_yielded += batch.count
                    yield batch.batch
                else:
                    # Without automatic batching (batch_size=None) every item is one sample.
                    self.num_samples_yielded += _batch_len(batch) if self._auto_collation else 1
                    yield batch
            whole = True
        finally:
            # Ended, broken off or failed: non-persistent workers (and kept ones, unless the
            # epoch was read to its end) are shut down now (as torch does when its iterator
            # goes, which a traceback may delay), then the maps of the shared memory they sent
            # batches through (streaming.dataset.handoff) let go.
            self._running -= 1
            batches.close()
            if self._reuse_workers and not (keep and whole):
                _shut_down(iterator)
                if keep:
                    self._iterator = None
            elif not self.persistent_workers:
                _shut_down(iterator)
            del batches, iterator
            release_dead_workers()

    def state_dict(self) -> dict[str, Any] | None:
        """The dataset's resume state after the samples yielded so far (None if not streaming)."""
        if not isinstance(self.dataset, StreamingDataset):
            return None
        world = self.dataset.world
        ranks = world.world_size // (self.dataset.replication or 1)
        return self.dataset.state_dict(self.num_samples_yielded * ranks, False)

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume the dataset from ``obj`` at the next iteration."""
        if isinstance(self.dataset, StreamingDataset):
            self.dataset.load_state_dict(obj)
