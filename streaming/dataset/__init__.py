"""The dataset layer: settings, streams, the shard cache, epochs, and ``StreamingDataset``.

Modules: ``config`` (every argument validated once: ``DatasetConfig``, ``ResumableLayout``),
``stream`` (one source of shards), ``cache`` (the node-wide shard cache and its LRU),
``epochs`` (epoch numbering and resume records), ``iteration`` (the shared epoch order and the
reading loop), ``prefetch`` (the node's downloads in first-use order) and ``dataset`` (the
glue).

``StreamingDataset`` is imported on first access: it needs torch, and a submodule must not pull
torch in through this package's ``__init__``. The other names are light and imported here:
``source_stream`` registers the ``'source'`` stream (data files streamed as they are, see
``streaming.sources``) in ``streams_registry`` on import, which every use of the package must
see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streaming._lazy import load_lazy
from streaming.dataset.config import DatasetConfig, ResumableLayout
from streaming.dataset.source_stream import SourceStream
from streaming.dataset.stream import Stream, streams_registry

if TYPE_CHECKING:
    from streaming.dataset.dataset import StreamingDataset

__all__ = ['DatasetConfig', 'ResumableLayout', 'SourceStream', 'Stream', 'StreamingDataset',
           'streams_registry']


def __getattr__(name: str) -> Any:
    return load_lazy(globals(), {'StreamingDataset': 'streaming.dataset.dataset'}, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | {'StreamingDataset'})
