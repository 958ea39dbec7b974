"""The dataset layer: settings, streams, the shard cache, epochs, and ``StreamingDataset``.

Modules: ``config`` (every argument validated once: ``DatasetConfig``, ``ResumableLayout``),
``stream`` (one source of shards), ``cache`` (the node-wide shard cache and its LRU),
``epochs`` (epoch numbering and resume records), ``iteration`` (the shared epoch order and the
reading loop), ``prefetch`` (the node's downloads in first-use order) and ``dataset`` (the
glue).

The names below are imported on first access: ``StreamingDataset`` needs torch, and a
submodule (``streaming.dataset.sources`` for the CLI's ``index``, ``inspect`` and ``validate`` of
Parquet/JSONL files) must not pull it in through this package's ``__init__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streaming._lazy import load_lazy

# Public name -> module that defines it, imported on first access.
_LAZY = {'DatasetConfig': 'streaming.dataset.config',
         'ResumableLayout': 'streaming.dataset.config',
         'StreamingDataset': 'streaming.dataset.dataset',
         'SourceStream': 'streaming.dataset.sources',
         'Stream': 'streaming.dataset.stream',
         'streams_registry': 'streaming.dataset.stream'}

if TYPE_CHECKING:
    from streaming.dataset.config import DatasetConfig, ResumableLayout
    from streaming.dataset.dataset import StreamingDataset
    from streaming.dataset.sources import SourceStream
    from streaming.dataset.stream import Stream, streams_registry

__all__ = ['DatasetConfig', 'ResumableLayout', 'SourceStream', 'Stream', 'StreamingDataset',
           'streams_registry']


def __getattr__(name: str) -> Any:
    return load_lazy(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
