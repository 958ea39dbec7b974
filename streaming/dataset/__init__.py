"""The dataset layer: settings, streams, epochs, and ``StreamingDataset``.

Modules: ``config`` (every argument validated once, grouped by the part that reads it:
``DatasetConfig``, ``ResumableLayout``), ``stream`` (one source of shards), ``stream_setup``
(the streams' set-up on a node: indexes, shard tables, weights), ``epochs`` (epoch numbering
and resume records), ``iteration`` (the shared epoch order and the reading loop) and
``dataset`` (the glue). The shard cache and the node's downloads are ``streaming.cache``'s.

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
