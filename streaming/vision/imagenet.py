"""ImageNet as written by ``python -m streaming.vision.convert.imagenet``."""

from streaming.vision.base import StreamingVisionDataset

__all__ = ['StreamingImageNet']


class StreamingImageNet(StreamingVisionDataset):
    """ImageNet: JPEG images ``x`` and class indices ``y``."""
