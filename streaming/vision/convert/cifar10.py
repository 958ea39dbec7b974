"""Convert CIFAR-10 (the python pickle batches) to MDS.

``python -m streaming.vision.convert.cifar10 --in_root DIR --out_root OUT``, where ``DIR`` holds
``cifar-10-batches-py/`` (as torchvision and the official tarball lay it out) or is that
directory. Split ``train`` is ``data_batch_1..5``, split ``val`` is ``test_batch``. When a
split's batches are not there, they are downloaded into ``DIR`` through torchvision
(``torchvision.datasets.CIFAR10(DIR, download=True)``), as the reference does; without
torchvision the error says what to install or where to put the files.
Columns: ``i`` (int), ``x`` (pil image, 32x32 RGB), ``y`` (int label).
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
    if split not in _BATCHES:
        raise ValueError(f'CIFAR-10 split must be one of {sorted(_BATCHES)}, got {split!r}.')
    folder = _batches_folder(in_root, split)
    if folder is None:
        download(in_root, split)
        folder = _batches_folder(in_root, split)
        if folder is None:
            raise FileNotFoundError(f'torchvision downloaded CIFAR-10 into {in_root}, but the '
                                    f'batches of split {split!r} are still not there.')
    pairs: list[tuple[object, int]] = []
    for name in _BATCHES[split]:
        with open(os.path.join(folder, name), 'rb') as f:
            batch = pickle.load(f, encoding='latin1')
        images = np.asarray(batch['data'], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        labels = batch.get('labels', batch.get('fine_labels'))
        pairs.extend((Image.fromarray(image), int(label)) for image, label in zip(images, labels))
    return pairs


def _batches_folder(in_root: str, split: str) -> str | None:
    """The folder holding all of ``split``'s batches, if there is one.

    ``in_root/cifar-10-batches-py`` (as torchvision and the tarball lay it out) or ``in_root``.
    """
    for folder in (os.path.join(in_root, 'cifar-10-batches-py'), in_root):
        if all(os.path.isfile(os.path.join(folder, name)) for name in _BATCHES[split]):
            return folder
    return None


def download(in_root: str, split: str) -> None:
    """Download CIFAR-10 into ``in_root/cifar-10-batches-py`` through torchvision."""
    try:
        from torchvision.datasets import CIFAR10
    except Exception as error:  # Not installed, or installed but not importable.
        raise FileNotFoundError(
            f'CIFAR-10 batches of split {split!r} ({", ".join(_BATCHES[split])}) are not in '
            f'{in_root} or {os.path.join(in_root, "cifar-10-batches-py")}, and torchvision, '
            f'which downloads them, cannot be imported ({type(error).__name__}: {error}). '
            f'Install it (pip install torchvision), or download '
            f'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz and extract it into '
            f'{in_root}.') from error
    os.makedirs(in_root, exist_ok=True)
    CIFAR10(root=in_root, train=split == 'train', download=True)


def main(args: Namespace) -> None:
    """Convert each split to ``out_root/split``."""
    for split in get_list_arg(args.splits):
        convert_image_class_dataset(load_split(args.in_root, split), args.out_root, split,
                                    args.compression, get_list_arg(args.hashes), args.size_limit,
                                    bool(args.progress_bar), bool(args.leave))


if __name__ == '__main__':
    main(parse_args())
