"""Streaming vision datasets: CIFAR-10, ImageNet, ADE20K and COCO (torchvision optional)."""

from streaming.vision.ade20k import StreamingADE20K
from streaming.vision.base import StreamingVisionDataset
from streaming.vision.cifar10 import StreamingCIFAR10
from streaming.vision.coco import StreamingCOCO
from streaming.vision.imagenet import StreamingImageNet

__all__ = ['StreamingADE20K', 'StreamingCIFAR10', 'StreamingCOCO', 'StreamingImageNet',
           'StreamingVisionDataset']
