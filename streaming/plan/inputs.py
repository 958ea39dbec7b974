"""What a plan starts from: the dataset's shape and the run's settings.

The shape comes from ``index.json`` files or a synthetic description.

Only indexes are read: each shard's sample count, the bytes a download fetches (the compressed
file when there is one) and the bytes it takes in the cache (what ``ShardCache`` counts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from streaming.util import bytes_to_int

__all__ = ['DatasetShape', 'RunSettings']


def _entry_bytes(entry: dict[str, Any], keys: tuple[str, str]) -> int:
    """Bytes of a shard entry's data and meta files, the first of ``keys`` present of each."""
    total = 0
    for kind in ('data', 'meta'):
        for prefix in keys:
            info = entry.get(f'{prefix}_{kind}')
            if info:
                total += int(info.get('bytes') or 0)
                break
    return total


@dataclass
class DatasetShape:
    """Shards of one or more streams: samples, bytes fetched, bytes held, stream of each."""

    samples: np.ndarray
    fetch_bytes: np.ndarray
    held_bytes: np.ndarray
    streams: np.ndarray
    index_bytes: int
    files_per_shard: np.ndarray
    source: str = 'synthetic'
    stream_names: list[str] = field(default_factory=list)

    @property
    def num_shards(self) -> int:
        return len(self.samples)

    @property
    def total_samples(self) -> int:
        return int(self.samples.sum())

    @property
    def total_bytes(self) -> int:
        return int(self.fetch_bytes.sum())

    @classmethod
    def synthetic(cls, samples: int, shard_samples: int, sample_bytes: int,
                  compression_ratio: float = 1.0) -> DatasetShape:
        """A dataset of ``samples`` samples of ``sample_bytes``, ``shard_samples`` per shard."""
        for name, value in (('samples', samples), ('shard_samples', shard_samples),
                            ('sample_bytes', sample_bytes)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f'synthetic dataset: `{name}` must be a positive integer, got '
                                 f'{value!r}')
        if not compression_ratio >= 1.0:
            raise ValueError(f'synthetic dataset: `compression_ratio` must be at least 1, got '
                             f'{compression_ratio!r}')
        full, rest = divmod(int(samples), int(shard_samples))
        counts = np.full(full + (rest > 0), shard_samples, np.int64)
        if rest:
            counts[-1] = rest
        held = counts * int(sample_bytes)
        fetched = np.maximum(1, (held / compression_ratio).astype(np.int64))
        return cls(counts, fetched, held, np.zeros(len(counts), np.int64),
                   index_bytes=200 * len(counts), files_per_shard=np.ones(len(counts), np.int64),
                   source=f'synthetic: {samples} samples of {sample_bytes} B, {shard_samples} '
                          f'per shard', stream_names=['synthetic'])

    @classmethod
    def from_indexes(cls, indexes: Sequence[tuple[str, dict[str, Any], int]]) -> DatasetShape:
        """From ``(name, parsed index.json, its size in bytes)`` per stream."""
        samples, fetched, held, streams, files = [], [], [], [], []
        for stream, (name, index, _) in enumerate(indexes):
            shards = index.get('shards')
            if not isinstance(shards, list):
                raise ValueError(f'{name}: index.json has no `shards` list')
            for number, entry in enumerate(shards):
                try:
                    samples.append(int(entry['samples']))
                except (KeyError, TypeError, ValueError):
                    raise ValueError(f'{name}: shard {number} of index.json has no integer '
                                     f'`samples`') from None
                fetched.append(_entry_bytes(entry, ('zip', 'raw')))
                held.append(_entry_bytes(entry, ('raw', 'zip')))
                files.append(sum(1 for key in ('raw_data', 'raw_meta') if entry.get(key)))
                streams.append(stream)
        if not samples:
            raise ValueError('the dataset has no shards: nothing to plan')
        return cls(np.array(samples, np.int64), np.array(fetched, np.int64),
                   np.array(held, np.int64), np.array(streams, np.int64),
                   index_bytes=sum(size for _, _, size in indexes),
                   files_per_shard=np.maximum(1, np.array(files, np.int64)),
                   source=', '.join(name for name, _, _ in indexes),
                   stream_names=[name for name, _, _ in indexes])

    @classmethod
    def from_urls(cls, urls: Sequence[str]) -> DatasetShape:
        """Read the ``index.json`` of each URL (local path or remote); one stream per URL."""
        import os

        from streaming.dataset_dir import DatasetDir, find_datasets
        found = []
        for url in urls:
            for location in find_datasets(url):
                dataset = DatasetDir(location)
                try:
                    path = dataset.fetch('index.json')
                    size = os.path.getsize(path)
                finally:
                    dataset.close()
                found.append((location, dataset.index, size))
        return cls.from_indexes(found)

    def subset(self, shards: int) -> DatasetShape:
        """The first ``shards`` shards of every stream in proportion (for a sampled plan)."""
        keep = np.zeros(self.num_shards, bool)
        for stream in np.unique(self.streams):
            members = np.flatnonzero(self.streams == stream)
            take = max(1, int(round(shards * len(members) / self.num_shards)))
            keep[members[:take]] = True
        return DatasetShape(self.samples[keep], self.fetch_bytes[keep], self.held_bytes[keep],
                            self.streams[keep], self.index_bytes, self.files_per_shard[keep],
                            self.source, self.stream_names)


@dataclass
class RunSettings:
    """The run being planned; the defaults are ``StreamingDataset``'s and a DataLoader's.

    ``steps_per_s`` (or ``samples_per_s``, per node) is the model's speed; None: the model
    waits for nothing but data. ``cache_limit`` is per node (bytes or a string like ``10gb``).
    ``predownload`` None: the scheduler's default lookahead (bounded by bytes).
    ``build_s``: seconds from the start to the dataset built, when the node's downloads begin
    (besides fetching the index); ``startup_s``: seconds from the start to its DataLoader
    workers reading (building the dataset, starting the workers); ``decode_s_per_sample``: a
    worker's seconds per sample once its shard is local. All three are this machine's: measure
    them with an epoch over a fast link, as ``benchmarks/plan_calibration.py`` does.
    Nodes planned together do not begin at one instant, and a node's requests due together do
    not reach the store at one: ``start_spread_s`` spreads the nodes' starts (each drawn in
    ``[0, start_spread_s]``) and ``send_gap_s`` is the least time between two GETs a node sends
    to a throttling store (the time it takes to send one). Both decide which nodes a throttling
    store serves first; a fleet over a fast link shows them (``docs/plan.md``, Calibration).
    """

    nodes: int = 1
    ranks_per_node: int = 1
    workers: int = 2
    batch_size: int = 32
    epochs: int = 1
    shuffle: bool = True
    shuffle_algo: str = 'py1e'
    shuffle_block_size: int | None = None
    num_canonical_nodes: int | None = None
    seed: int = 9176
    cache_limit: int | str | None = None
    predownload: int | None = None
    proportions: list[float] | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    prefetch_factor: int = 2
    build_s: float = 0.1
    startup_s: float = 0.35
    decode_s_per_sample: float = 0.0
    start_spread_s: float = 0.0
    send_gap_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ('nodes', 'ranks_per_node', 'batch_size', 'epochs', 'prefetch_factor'):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f'run: `{name}` must be a positive integer, got {value!r}')
        if not isinstance(self.workers, (int, np.integer)) or self.workers < 0:
            raise ValueError(f'run: `workers` must be a non-negative integer, got '
                             f'{self.workers!r}')
        if isinstance(self.cache_limit, str):
            self.cache_limit = bytes_to_int(self.cache_limit)
        if self.cache_limit is not None and self.cache_limit <= 0:
            raise ValueError(f'run: `cache_limit` must be positive, got {self.cache_limit!r}')
        if self.predownload is not None and self.predownload < 0:
            raise ValueError(f'run: `predownload` must be non-negative, got {self.predownload!r}')
        for name in ('build_s', 'startup_s', 'decode_s_per_sample', 'start_spread_s',
                     'send_gap_s'):
            if not getattr(self, name) >= 0:
                raise ValueError(f'run: `{name}` must be non-negative seconds, got '
                                 f'{getattr(self, name)!r}')
        for name in ('steps_per_s', 'samples_per_s'):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f'run: `{name}` must be positive, got {value!r}')

    @property
    def cache_bytes(self) -> int | None:
        """``cache_limit`` in bytes (a string is converted when the settings are made)."""
        return None if self.cache_limit is None else int(self.cache_limit)

    @property
    def loader_workers(self) -> int:
        """Workers per rank as the order counts them (0, the main process, counts as one)."""
        return max(1, self.workers)

    @property
    def step_seconds(self) -> float:
        """Seconds the model takes per step (all ranks of a node take one batch); 0: none."""
        if self.steps_per_s:
            return 1.0 / self.steps_per_s
        if self.samples_per_s:
            return self.batch_size * self.ranks_per_node / self.samples_per_s
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
