"""Convert CIFAR-10 (the python pickle batches) to MDS.

``python -m streaming.vision.convert.cifar10 --in_root DIR --out_root OUT``, where ``DIR`` holds
``cifar-10-batches-py/`` (as torchvision and the official tarball lay it out) or is that
directory. Split ``train`` is ``data_batch_1..5``, split ``val`` is ``test_batch``. Nothing is
downloaded. Columns: ``i`` (int), ``x`` (pil image, 32x32 RGB), ``y`` (int label).
"""

from __future__ import annotations

import os
import pickle
from argparse import Namespace

import numpy as np

from streaming.util import get_list_arg
from streaming.vision.convert.base import common_parser, convert_image_class_dataset

__all__ = ['convert_image_class_dataset', 'get_list_arg', 'load_split', 'main', 'parse_args']

_BATCHES = {'train': [f'data_batch_{i}' for i in range(1, 6)], 'val': ['test_batch'],
            'test': ['test_batch']}


def parse_args() -> Namespace:
    """Command-line arguments."""
    return common_parser(__doc__.splitlines()[0], size_limit=1 << 20).parse_args()


def load_split(in_root: str, split: str) -> list[tuple[object, int]]:
    """The split's ``(PIL image, label)`` pairs, read from the pickle batches."""
    from PIL import Image
    folder = os.path.join(in_root, 'cifar-10-batches-py')
    if not os.path.isdir(folder):
        folder = in_root
    if split not in _BATCHES:
        raise ValueError(f'CIFAR-10 split must be one of {sorted(_BATCHES)}, got {split!r}.')
    pairs: list[tuple[object, int]] = []
    for name in _BATCHES[split]:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f'CIFAR-10 batch not found: {path} (expected the python '
                                    f'version, cifar-10-batches-py).')
        with open(path, 'rb') as f:
            batch = pickle.load(f, encoding='latin1')
        images = np.asarray(batch['data'], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        labels = batch.get('labels', batch.get('fine_labels'))
        pairs.extend((Image.fromarray(image), int(label)) for image, label in zip(images, labels))
    return pairs


def main(args: Namespace) -> None:
    """Convert each split to ``out_root/split``."""
    for split in get_list_arg(args.splits):
        convert_image_class_dataset(load_split(args.in_root, split), args.out_root, split,
                                    args.compression, get_list_arg(args.hashes), args.size_limit,
                                    bool(args.progress_bar), bool(args.leave))


if __name__ == '__main__':
    main(parse_args())
