"""The reference's ``streaming.base.dataloader``."""

from streaming.base.world import World
from streaming.dataloader import StreamingDataLoader
from streaming.dataset.dataset import StreamingDataset

__all__ = ['StreamingDataLoader', 'StreamingDataset', 'World']
