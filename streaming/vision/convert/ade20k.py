"""Convert ADE20K to MDS.

The input is ``images/{training,validation}/ADE_*.jpg`` with the matching
``annotations/.../ADE_*.png``.

``python -m streaming.vision.convert.ade20k --in_root DIR --out_root OUT``. Columns: ``uid``
(bytes), ``x`` (jpeg image), ``y`` (png annotation), stored as the original file bytes.
"""

from __future__ import annotations

import os
import random
from argparse import Namespace
from glob import glob
from typing import Any, Iterable

from streaming.util import get_list_arg
from streaming.vision.convert.base import _progress, common_parser, warn_count
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'each', 'get', 'get_list_arg', 'main', 'parse_args']

_FULL = {'train': 20206, 'val': 2000}
# Train images known to be corrupt in the official release.
_CORRUPT = {'00003020', '00001701', '00013508', '00008455'}


def parse_args() -> Namespace:
    """Command-line arguments."""
    return common_parser('Convert ADE20K to MDS.', size_limit=1 << 22).parse_args()


def get(in_root: str, split: str, shuffle: bool) -> list[tuple[str, str, str]]:
    """The split's ``(uid, image path, annotation path)`` triples."""
    if split not in _FULL:
        raise ValueError(f'ADE20K split must be one of {sorted(_FULL)}, got {split!r}.')
    sub = 'training' if split == 'train' else 'validation'
    images_dir = os.path.join(in_root, 'images', sub)
    annotations_dir = os.path.join(in_root, 'annotations', sub)
    for path in (images_dir, annotations_dir):
        if not os.path.isdir(path):
            raise FileNotFoundError(f'ADE20K directory not found: {path}')
    uids = [os.path.basename(p)[len(f'ADE_{split}_'):-len('.jpg')]
            for p in sorted(glob(os.path.join(images_dir, f'ADE_{split}_*.jpg')))]
    if split == 'train':
        uids = [uid for uid in uids if uid not in _CORRUPT]
    samples = [(uid, os.path.join(images_dir, f'ADE_{split}_{uid}.jpg'),
                os.path.join(annotations_dir, f'ADE_{split}_{uid}.png')) for uid in uids]
    if shuffle:
        random.shuffle(samples)
    return samples


def each(samples: Iterable[tuple[str, str, str]]) -> Iterable[dict[str, Any]]:
    """The MDS sample of each triple."""
    for uid, image_path, annotation_path in samples:
        with open(image_path, 'rb') as image, open(annotation_path, 'rb') as annotation:
            yield {'uid': uid.encode(), 'x': image.read(), 'y': annotation.read()}


def main(args: Namespace) -> None:
    """Convert each split to ``out_root/split``."""
    for split in get_list_arg(args.splits):
        samples = get(args.in_root, split, shuffle=split == 'train')
        warn_count('ADE20K', split, len(samples), _FULL[split])
        with MDSWriter(out=os.path.join(args.out_root, split),
                       columns={'uid': 'bytes', 'x': 'jpeg', 'y': 'png'},
                       compression=args.compression or None,
                       hashes=get_list_arg(args.hashes), size_limit=args.size_limit,
                       progress_bar=bool(args.progress_bar)) as writer:
            for sample in each(_progress(samples, bool(args.progress_bar), bool(args.leave))):
                writer.write(sample)


if __name__ == '__main__':
    main(parse_args())
