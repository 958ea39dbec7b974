"""Batches, not samples, through a torch ``DataLoader``.

``StreamingDataset.__iter__`` returns a ``SampleStream``: an iterator of samples (what torch's
protocol asks for) that can also hand out the next ``n`` samples at once. When the dataset is
iterated by the fetcher of a ``DataLoader`` with a ``batch_size`` (torch's
``_IterableDatasetFetcher``, which would call ``next()`` once per sample and then the
``collate_fn``), ``attach_to_fetcher`` gives that one fetcher object a ``fetch`` that takes the
whole batch at once: the same samples in the same batches, ``drop_last`` honoured, and

* with torch's default collate and MDS columns of ``int``/``str``/``bytes``: the collated
  batch built from columns gathered per shard (no per-sample dict), equal to what
  ``default_collate`` returns for those samples;
* otherwise: the list of samples, then the loader's ``collate_fn`` on it, as torch does.

Nothing process-wide changes: only the fetcher torch made for this iteration is touched, and
only if it is exactly the class and state expected; ``STREAMING_BATCH_FETCH=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from streaming.cache.prefetch import Progress
from streaming.cache.shard_cache import ShardCache
from streaming.dataset import handoff
from streaming.dataset.iteration import shard_chunks
from streaming.dataset.span_table import ShardOpenFailed, SpanTable
from streaming.errors import ShardFileError
from streaming.format.mds.reader import Spans
from streaming.sources.reader import DecodeAhead, SourceReader, undecoded
from streaming.telemetry import WorkerClock

__all__ = ['SampleStream', 'attach_to_fetcher']

_EMPTY = np.zeros(0, np.int64)


class SampleStream:
    """This worker's samples of the epoch, one at a time (``next``) or ``n`` at once (``take``).

    ``fast``: read through ``cache`` (no subclass overrides ``get_item``/``__getitem__``);
    otherwise every sample comes from ``get(sample_id)``.
    """

    def __init__(self, sample_ids: np.ndarray, shard_starts: np.ndarray, cache: ShardCache,
                 get: Callable[[int], Any], fast: bool, prefetcher: Progress | None,
                 clock: WorkerClock | None = None) -> None:
        self.shard_starts = shard_starts
        self.cache = cache
        self.get = get
        self.fast = fast
        self.prefetcher = prefetcher
        self.clock = clock
        self._chunks = shard_chunks(sample_ids, shard_starts)
        self._shards, self._indices = _EMPTY, _EMPTY
        self._start = 0  # Position of the current chunk in this worker's order.
        self._next = 0  # Next sample within the current chunk.
        self._ahead: list[tuple[int, np.ndarray, np.ndarray]] = []  # Chunks read ahead.
        self._exhausted = False  # No chunk left to read (some may be ahead).
        self._done = False
        self._plain: set[int] = set()  # Shards that are not units of data files.
        # One gather per batch readies all of a batch's shards before reading any; under a
        # ``cache_limit`` the cache maps each as it readies it, so that a later one's download
        # evicting an earlier one costs no refetch (``ShardCache.ready``).
        self._table = SpanTable(shard_starts) if fast else None
        self._tabled = np.zeros(len(shard_starts), bool)  # Shards the table accepts.

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        shards, indices = self.take(1)
        if not len(shards):
            raise StopIteration
        return self.read(shards, indices)[0]

    def _finish(self) -> None:
        self._done = True
        if self.prefetcher is not None:
            self.prefetcher.stop()

    def _load(self) -> bool:
        """Make the next chunk current; False (and done) if none is left."""
        if not self._ahead and not self._exhausted:
            self._read_ahead()
        if not self._ahead:
            self._finish()
            return False
        self._start, self._shards, self._indices = self._ahead.pop(0)
        self._next = 0
        return True

    def _read_ahead(self) -> None:
        try:
            self._ahead.append(next(self._chunks))
        except StopIteration:
            self._exhausted = True

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard ids, indices within the shards) of the next up to ``n`` samples."""
        parts = []
        first = -1  # Position of the first sample taken.
        while n > 0 and not self._done:
            if self._next >= len(self._shards):
                if not self._load():
                    break
                continue
            if first < 0:
                first = self._start + self._next
            stop = min(self._next + n, len(self._shards))
            parts.append((self._shards[self._next:stop], self._indices[self._next:stop]))
            n -= stop - self._next
            self._next = stop
        if self.prefetcher is not None and first >= 0:
            # The samples are read after this: report the first of them (as ``next`` does),
            # not the position past them, or the schedule takes their shards for done with.
            self.prefetcher.advance(first)
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return _EMPTY, _EMPTY
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    def fewer_left_than(self, n: int) -> bool:
        """Whether fewer than ``n`` samples are left (reads chunks ahead to know)."""
        left = len(self._shards) - self._next + sum(len(chunk[1]) for chunk in self._ahead)
        while left < n and not self._exhausted:
            self._read_ahead()
            if not self._exhausted:
                left += len(self._ahead[-1][1])
        return left < n

    def read(self, shards: np.ndarray, indices: np.ndarray) -> list[Any]:
        """The samples at (``shards``, ``indices``), each as ``dataset[i]`` gives it."""
        if not self.fast:
            ids = (self.shard_starts[shards] + indices).tolist()
            return [self.get(i) for i in ids]
        read = self.cache.read
        return [read(s, i) for s, i in zip(shards.tolist(), indices.tolist())]

    def gather(self, shards: np.ndarray, indices: np.ndarray,
               spans: bool = False) -> list[dict[str, Any]] | None:
        """The columns of these samples (``MDSReader.gather_columns``), in their order.

        One call per distinct shard (a shuffled batch visits most of its shards several
        times), merged back into batch order; returned as a list of one run. ``spans``:
        ``bytes`` columns as a ``Scattered`` of ``Spans`` of the shards' maps, valid until
        this stream next prepares a shard (``handoff.pack`` copies them at once).
        """
        if not self.fast:
            return None
        if self._table is not None:
            found = self._gather_tabled(shards, indices, spans)
            if found is not _NOT_TABLED:
                return found
        # The distinct shards in ascending order, and the positions of each one's samples in
        # batch order (what np.unique + a stable argsort of its inverse give, in fewer steps).
        order = np.argsort(shards, kind='stable')
        ordered = shards[order]
        bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(order)]
        ids = ordered[bounds[:-1]].tolist()
        where = [order[begin:end] for begin, end in zip(bounds, bounds[1:])]
        ordered_indices = indices[order]
        picks = [ordered_indices[begin:end] for begin, end in zip(bounds, bounds[1:])]
        # Units of data files (Parquet...) not decoded yet: made ready first, then decoded on
        # several threads ahead of their turn. Other shards are made ready one at a time, as
        # before (under a tight cache_limit, readying one may evict another). Shards found
        # not to be such units (MDS...) are remembered: they never become one.
        plain = self._plain
        early = {}
        if len(ids) > 1:
            shards = self.cache.shards
            for shard_id in ids:
                if shard_id in plain:
                    continue
                reader = shards[shard_id]
                if undecoded(reader):
                    early[shard_id] = self._ready(shard_id)
                elif not isinstance(reader, SourceReader):
                    plain.add(shard_id)
        ahead = DecodeAhead([early[shard_id] for shard_id in ids if shard_id in early])
        try:
            return self._gather(ids, where, picks, len(indices), spans, early, ahead)
        finally:
            ahead.close()

    def _gather_tabled(self, shards: np.ndarray, indices: np.ndarray, spans: bool) -> Any:
        """``gather`` through the ``SpanTable``, or ``_NOT_TABLED`` if a shard is not for it."""
        table = self._table
        assert table is not None
        ids = np.unique(shards)
        tabled = self._tabled
        if not tabled[ids].all():
            for shard_id in ids[~tabled[ids]].tolist():
                if not table.accepts(self.cache.shards[shard_id]):
                    return _NOT_TABLED
                tabled[shard_id] = True
        id_list = ids.tolist()
        ready = self.cache.ready
        clock = self.clock
        started = time.perf_counter() if clock is not None else 0.0
        readers = [ready(shard_id) for shard_id in id_list]
        if clock is not None:
            clock.add_wait(time.perf_counter() - started)
        try:
            columns = table.gather(readers, id_list, shards, indices, spans)
        except ShardOpenFailed as failed:
            self._open_failed(failed.shard_id, failed.error)
            return None
        return None if columns is None else [columns]

    def _open_failed(self, shard_id: int, error: Exception) -> None:
        """A gather found shard ``shard_id``'s files gone or bad: the per-sample path retries."""
        if isinstance(error, FileNotFoundError):  # Evicted under us: prepared again.
            self.cache.forget(shard_id)
        else:  # A bad cached copy: fetched again, then retried.
            assert isinstance(error, ShardFileError)
            self.cache.refetch_once(shard_id, error)

    def _ready(self, shard_id: int) -> Any:
        """``cache.ready(shard_id)``, its time counted as waiting."""
        clock = self.clock
        if clock is None:
            return self.cache.ready(shard_id)
        started = time.perf_counter()
        reader = self.cache.ready(shard_id)
        clock.add_wait(time.perf_counter() - started)
        return reader

    def _gather(self, ids: list[int], where: list[np.ndarray], picks: list[np.ndarray],
                count: int, spans: bool, early: dict[int, Any],
                ahead: DecodeAhead) -> list[dict[str, Any]] | None:
        """Per shard ``ids[k]``: its samples ``picks[k]``, at batch positions ``where[k]``."""
        groups = []
        for shard_id, positions, picked in zip(ids, where, picks):
            if early:
                reader = early[shard_id] if shard_id in early else self._ready(shard_id)
                ahead.wait(reader)
            else:
                reader = self._ready(shard_id)
            gather = getattr(reader, 'gather_columns', None)
            try:
                columns = None if gather is None else \
                    gather(picked, spans=True) if spans else gather(picked)
            except (FileNotFoundError, ShardFileError) as error:
                self._open_failed(shard_id, error)
                return None
            if columns is None:
                return None
            groups.append((positions, columns))
        _copy_mixed_spans(groups)
        first = groups[0][1]
        names, kinds = first.keys(), tuple(map(type, first.values()))
        if any(columns.keys() != names or tuple(map(type, columns.values())) != kinds
               for _, columns in groups[1:]):
            return None  # Streams with different columns: let collate see whole samples.
        return [_merge(groups, count)]


_NOT_TABLED: Any = object()


def _copy_mixed_spans(groups: list[tuple[np.ndarray, dict[str, Any]]]) -> None:
    """A ``bytes`` column given as ``Spans`` by some shards and as values by others: values.

    (A unit mapped from the node's shared directory gives ``Spans``; one decoded here, lists.)
    """
    for name in groups[0][1]:
        kinds = {type(columns.get(name)) for _, columns in groups}
        if len(kinds) > 1 and kinds <= {Spans, list}:
            for _, columns in groups:
                if isinstance(columns[name], Spans):
                    columns[name] = columns[name].values()


def _merge(groups: list[tuple[np.ndarray, dict[str, Any]]], count: int) -> dict[str, Any]:
    """The columns of ``groups`` (batch positions, columns of those samples) in batch order."""
    merged: dict[str, Any] = {}
    for name, first in groups[0][1].items():
        if isinstance(first, Spans):
            merged[name] = handoff.Scattered([(columns[name], positions)
                                              for positions, columns in groups], count)
        elif len(groups) == 1:
            merged[name] = first
        elif isinstance(first, np.ndarray):
            merged[name] = np.empty(count, first.dtype)
            for positions, columns in groups:
                merged[name][positions] = columns[name]
        else:
            values: list[Any] = [None] * count
            for positions, columns in groups:
                for position, value in zip(positions.tolist(), columns[name]):
                    values[position] = value
            merged[name] = values
    return merged


def _collate_columns(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``default_collate`` makes of the samples in ``runs``: int64 tensors and lists."""
    import torch
    batch: dict[str, Any] = {}
    for name, first in runs[0].items():
        if isinstance(first, np.ndarray):
            values = np.concatenate([run[name] for run in runs]) if len(runs) > 1 else first
            batch[name] = torch.from_numpy(np.ascontiguousarray(values, np.int64)).clone()
        else:
            batch[name] = first if len(runs) == 1 else [v for run in runs for v in run[name]]
    return batch


def _samples_from_columns(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-sample dicts ``decode_sample`` would give, from gathered columns."""
    samples = []
    for run in runs:
        names = list(run)
        values = [v.tolist() if isinstance(v, np.ndarray) else v for v in run.values()]
        samples.extend(dict(zip(names, row)) for row in zip(*values))
    return samples


def _default_collate() -> Any:
    from torch.utils.data import default_collate
    return default_collate


def _fetcher_class() -> type | None:
    try:
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:  # A torch without it: keep torch's own per-sample fetch.
        return None
    return _IterableDatasetFetcher


def attach_to_fetcher(dataset: Any, stream: SampleStream, depth: int = 2) -> bool:
    """If ``dataset.__iter__`` was called by torch's iterable fetcher, make it fetch batches.

    ``depth``: frames between this call and the fetcher's ``__init__``. Returns whether it did.
    """
    if os.environ.get('STREAMING_BATCH_FETCH', '1') == '0':
        return False
    cls = _fetcher_class()
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    if cls is None or frame.f_code is not cls.__init__.__code__:
        return False
    fetcher = frame.f_locals.get('self')
    del frame
    if (type(fetcher) is not cls or getattr(fetcher, 'dataset', None) is not dataset or
            not getattr(fetcher, 'auto_collation', False) or 'fetch' in vars(fetcher)):
        return False
    fetcher.fetch = _BatchFetch(fetcher, stream)
    return True


def _worker_loop_code() -> Any:
    try:
        from torch.utils.data._utils.worker import _worker_loop
    except ImportError:
        return None
    return getattr(_worker_loop, '__code__', None)


class _Gathered(NamedTuple):
    """A batch to be packed (``handoff``): its sample count, gathered columns, whether last."""

    count: int
    runs: list[dict[str, Any]]
    last: bool


class _BatchFetch:
    """The batch-at-once ``fetch`` of one torch fetcher (see the module docstring).

    An index with a ``group`` attribute above 1 (``StreamingDataLoader``'s, with workers) asks
    for a group: the next ``min(2 ** round, group)`` batches of this worker's stream in one
    queue item (``round``: groups fetched so far in this pass), which the loader takes apart.
    """

    def __init__(self, fetcher: Any, stream: SampleStream) -> None:
        self.fetcher = fetcher
        self.stream = stream
        collate = fetcher.collate_fn
        # StreamingDataLoader wraps collate_fn to count samples: look through the wrapper.
        self.default = getattr(collate, 'inner_collate', collate) is _default_collate()
        self.counted = getattr(collate, 'counted', None)
        self.grouped = getattr(collate, 'grouped', None)
        self.rounds = 0  # Groups fetched in this pass.
        self.pack: bool | None = None  # Decided at the first call (see _packing).

    def _packing(self) -> bool:
        """Whether batches go to the main process through ``handoff`` (shared memory).

        Only when called by torch's own worker loop, which puts what ``fetch`` returns straight
        into its result queue; decided once, at the first call.
        """
        code = _worker_loop_code()
        try:
            caller = sys._getframe(2).f_code
        except ValueError:
            caller = None
        self.pack = code is not None and caller is code and handoff.enabled()
        return self.pack

    def __call__(self, possibly_batched_index: Any) -> Any:
        if self.default and self.pack is None:
            self._packing()
        group = getattr(possibly_batched_index, 'group', 1)
        if group > 1 and self.grouped is not None and self.counted is not None:
            return self._group(len(possibly_batched_index), min(1 << self.rounds, group))
        batch = self._batch(len(possibly_batched_index))
        if not isinstance(batch, _Gathered):
            return batch
        packed = handoff.pack(batch.runs, batch.last)
        return packed if self.counted is None else self.counted(batch.count, packed)

    def _group(self, wanted: int, size: int) -> Any:
        """The next ``size`` batches (fewer at the end of the pass), as one group.

        The group says whether it is this worker's last of the pass (so the loader knows it
        has a round's every group without waiting for the next round's first).
        """
        from torch.utils.data import get_worker_info
        fetcher = self.fetcher
        batches: list[Any] = []
        maps_held = getattr(self.stream.cache, 'maps_held', None)
        # The batches' spans point into shard maps, which readying the next batches' shards
        # may close (an eviction): held open until the group is packed, or else copied out.
        with maps_held() if maps_held is not None else contextlib.nullcontext():
            try:
                while len(batches) < size:
                    if maps_held is None and batches and isinstance(batches[-1], _Gathered):
                        batches[-1] = batches[-1]._replace(
                            runs=handoff.detached(batches[-1].runs))
                    batches.append(self._batch(wanted))
            except StopIteration:
                if not batches:
                    raise
            self.rounds += 1
            last = fetcher.ended or self.stream.fewer_left_than(
                wanted if fetcher.drop_last else 1)
            if any(isinstance(batch, _Gathered) for batch in batches):
                payload = handoff.pack_group([
                    batch.runs if isinstance(batch, _Gathered) else handoff.Collated(batch.batch)
                    for batch in batches], last)
            else:
                payload = [batch.batch for batch in batches]
        info = get_worker_info()
        assert self.grouped is not None
        return self.grouped(0 if info is None else info.id, self.rounds - 1,
                            [batch.count for batch in batches], payload, last)

    def _batch(self, wanted: int) -> Any:
        """The next batch of ``wanted`` samples (``_Gathered`` if it is to be packed)."""
        fetcher, stream, clock = self.fetcher, self.stream, self.stream.clock
        if fetcher.ended:
            if clock is not None:
                clock.flush()
            raise StopIteration
        started = time.perf_counter() if clock is not None else 0.0
        cpu = time.process_time() if clock is not None else 0.0
        shards, indices = stream.take(wanted)
        if len(shards) < wanted:
            fetcher.ended = True
        if not len(shards) or (fetcher.drop_last and len(shards) < wanted):
            if clock is not None:
                clock.flush()
            raise StopIteration
        pack = self.default and bool(self.pack)
        runs = stream.gather(shards, indices, spans=pack)
        if runs is None:
            batch = stream.read(shards, indices)
        elif pack:
            # The last batch of this pass tells the main process to let the ring go.
            last = fetcher.ended or stream.fewer_left_than(wanted if fetcher.drop_last else 1)
            batch = _Gathered(len(shards), runs, last)
        elif self.default:
            batch = _collate_columns(runs)
        else:
            batch = _samples_from_columns(runs)
        if runs is not None and self.default:
            if clock is not None:
                clock.add_read(time.perf_counter() - started, len(shards),
                               time.process_time() - cpu)
            if isinstance(batch, _Gathered) or self.counted is None:
                return batch
            return self.counted(len(shards), batch)
        if clock is None:
            return fetcher.collate_fn(batch)
        middle, cpu_middle = time.perf_counter(), time.process_time()
        batch = fetcher.collate_fn(batch)
        clock.add_collate(time.perf_counter() - middle)
        clock.add_read(middle - started, len(shards), cpu_middle - cpu)
        return batch
