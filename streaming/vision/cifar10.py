"""CIFAR-10 as written by ``python -m streaming.vision.convert.cifar10``."""

from streaming.vision.base import StreamingVisionDataset

__all__ = ['StreamingCIFAR10']


class StreamingCIFAR10(StreamingVisionDataset):
    """CIFAR-10: 32x32 RGB images ``x`` (PIL) and labels ``y`` in 0-9."""
