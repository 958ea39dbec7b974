"""Write a fake CIFAR-10 (random 32x32 images and labels) as MDS, for tests and benchmarks.

``python -m streaming.vision.convert.fake_cifar10 --out DIR --num_train N --num_val M``.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

import numpy as np

from streaming.vision.convert.base import convert_image_class_dataset

__all__ = ['convert_image_class_dataset', 'main', 'make_split', 'parse_args']


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=str, default='/tmp/fake_cifar10/')
    parser.add_argument('--num_train', type=int, default=8 * 8 * 16384)
    parser.add_argument('--num_val', type=int, default=8 * 8 * 2048)
    return parser.parse_args()


def make_split(root: str, split: str, count: int) -> None:
    """Write ``count`` random samples to ``root/split``."""
    from PIL import Image
    images = np.random.randint(0, 256, (count, 32, 32, 3), np.uint8)
    labels = np.random.randint(0, 10, count)
    dataset = [(Image.fromarray(x), int(y)) for x, y in zip(images, labels)]
    convert_image_class_dataset(dataset, root, split, progress_bar=False)


def main(args: Namespace) -> None:
    """Write the train and val splits."""
    make_split(args.out, 'train', args.num_train)
    make_split(args.out, 'val', args.num_val)


if __name__ == '__main__':
    main(parse_args())
