"""The streams' set-up on a node: their defaults, their indexes, their shards and their draws.

``set_up_streams`` is the one call the dataset makes for it. The node's first rank fetches every
stream's index, then publishes the node's shared directory; the other ranks wait for that
directory and read the indexes it fetched. Every rank then lays the streams' shards end to end
(``StreamTables``) and derives how many samples an epoch draws from each stream.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streaming.coord import SharedDir, make_job_token
from streaming.dataset.config import StreamSettings
from streaming.dataset.index_cache import ShardTable
from streaming.dataset.stream import Stream, streams_registry
from streaming.errors import EmptyIndexError
from streaming.world import World

__all__ = ['StreamTables', 'make_streams', 'set_up_streams']


def make_streams(streams: Sequence[Stream] | None, remote: str | None, local: str | None,
                 split: str | None, stream_name: str,
                 stream_config: dict[str, Any] | None) -> list[Stream]:
    """The dataset's streams: those given, or one inline stream of class ``stream_name``."""
    if streams is not None and (remote is not None or local is not None):
        raise ValueError('Pass either streams or remote/local, not both.')
    if streams is None:
        if remote is None and local is None:
            raise ValueError('StreamingDataset needs streams, or remote and/or local.')
        stream_cls = streams_registry.get(stream_name, None)
        if stream_cls is None:
            raise ValueError(f'Unknown stream_name {stream_name!r}; registered: '
                             f'{sorted(streams_registry)}.')
        streams = [stream_cls(remote=remote, local=local, split=split, **(stream_config or {}))]
    if not streams:
        raise ValueError('streams must hold at least one Stream.')
    return list(streams)


@dataclass(frozen=True)
class StreamTables:
    """All streams' shards end to end, and what an epoch draws from each stream.

    The field names are the dataset attributes the reference has (``proportions`` aside: each
    stream's share, or None when a stream gives no proportion).
    """

    shards: ShardTable
    num_shards: int
    stream_per_shard: np.ndarray
    samples_per_shard: np.ndarray
    sample_offset_per_shard: np.ndarray
    num_samples: int
    samples_per_stream: np.ndarray
    shards_per_stream: np.ndarray
    shard_offset_per_stream: np.ndarray
    sample_offset_per_stream: np.ndarray
    stream_choose: np.ndarray
    epoch_size: int  # Samples per epoch, all ranks together.
    proportions: np.ndarray | None

    @classmethod
    def build(cls, streams: Sequence[Stream], indexes: Sequence[dict[str, Any]],
              settings: StreamSettings, seed: int) -> StreamTables:
        """The tables of ``streams`` (with ``indexes``); refuses a stream without a sample."""
        # Readers may be built lazily (see index_cache): only sizes are read here.
        shards = ShardTable([stream.get_shards(index, settings.allow_unsafe_types)
                             for stream, index in zip(streams, indexes)])
        stream_per_shard = np.repeat(np.arange(len(streams), dtype=np.int64),
                                     [len(part) for part in shards.parts])
        samples_per_shard = shards.column('samples')
        for stream_id, stream in enumerate(streams):
            begin, end = shards.starts[stream_id], shards.starts[stream_id + 1]
            if not samples_per_shard[begin:end].sum():
                raise EmptyIndexError(f'Stream {stream_id} has no samples: its index '
                                      f'{os.path.join(stream.local_dir, "index.json")} lists '
                                      f'{end - begin} shards, none with a sample.')
        samples_per_stream = np.bincount(stream_per_shard, samples_per_shard,
                                         len(streams)).astype(np.int64)
        shards_per_stream = np.bincount(stream_per_shard, minlength=len(streams))
        # Through the stream class (a subclass may override it), which fills in each stream's
        # proportion, repeat and choose; the epoch then draws each stream's ``choose``.
        type(streams[0]).apply_weights(streams, samples_per_stream, settings.epoch_size, seed)
        choose = np.array([int(s.choose) for s in streams], np.int64)
        shares = [getattr(s, 'proportion', None) for s in streams]
        return cls(shards=shards, num_shards=len(shards), stream_per_shard=stream_per_shard,
                   samples_per_shard=samples_per_shard,
                   sample_offset_per_shard=_offsets(samples_per_shard),
                   num_samples=int(samples_per_shard.sum()),
                   samples_per_stream=samples_per_stream, shards_per_stream=shards_per_stream,
                   shard_offset_per_stream=_offsets(shards_per_stream),
                   sample_offset_per_stream=_offsets(samples_per_stream),
                   stream_choose=choose, epoch_size=int(choose.sum()),
                   proportions=None if None in shares else np.array(shares, np.float64))


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)])


def set_up_streams(streams: Sequence[Stream], split: str | None, settings: StreamSettings,
                   seed: int, world: World, write_summaries: bool,
                   node_arrays: Callable[[int], dict[str, tuple[str, tuple]]],
                   ) -> tuple[StreamTables, SharedDir]:
    """Set ``streams`` up on this node: (their tables, the node's shared directory).

    Each stream takes the dataset's ``split`` and download settings where it left them unset
    (through ``apply_default``, the reference's name, so an override still works). ``seed``
    draws the streams' partial shares; ``write_summaries``: whether index summaries may be
    written (see ``index_cache``). The first rank creates the shared directory with
    ``node_arrays(num_shards)``.
    """
    for stream in streams:
        stream.apply_default({'split': split, **settings.download_defaults()})
        stream.write_index_summary = write_summaries
    timeout = settings.coordination_timeout
    if world.is_local_leader:
        indexes = [s.get_index(fetch=True) for s in streams]
    token = make_job_token(world, '|'.join(f'{s.remote}>{s.local}/{s.split}' for s in streams))
    if not world.is_local_leader:
        # The first rank publishes the shared directory only after fetching the indexes.
        shared = SharedDir.create_or_join(token, world, {}, timeout=timeout)
        indexes = [s.get_index(fetch=False) for s in streams]
    tables = StreamTables.build(streams, indexes, settings, seed)
    if world.is_local_leader:
        shared = SharedDir.create_or_join(token, world, node_arrays(tables.num_shards),
                                          timeout=timeout)
    return tables, shared
