"""The dataset layer: streams, the shard cache, epochs, and ``StreamingDataset`` itself."""

from streaming.dataset.dataset import StreamingDataset
from streaming.dataset.stream import Stream, streams_registry

__all__ = ['Stream', 'StreamingDataset', 'streams_registry']
