"""The dataset layer: settings, streams, the shard cache, epochs, and ``StreamingDataset``.

Modules: ``config`` (every argument validated once: ``DatasetConfig``, ``ResumableLayout``),
``stream`` (one source of shards), ``cache`` (the node-wide shard cache and its LRU),
``epochs`` (epoch numbering and resume records), ``iteration`` (the shared epoch order and the
reading loop), ``prefetch`` (the node's downloads in first-use order) and ``dataset`` (the
glue).
"""

from streaming.dataset.config import DatasetConfig, ResumableLayout
from streaming.dataset.dataset import StreamingDataset
from streaming.dataset.sources import SourceStream
from streaming.dataset.stream import Stream, streams_registry

__all__ = ['DatasetConfig', 'ResumableLayout', 'SourceStream', 'Stream', 'StreamingDataset',
           'streams_registry']
