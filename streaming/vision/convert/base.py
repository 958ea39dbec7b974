"""Shared parts of the vision converters: the command-line options and the image-class writer."""

from __future__ import annotations

import os
import warnings
from argparse import ArgumentParser
from typing import Any, Sequence

import numpy as np

from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'common_parser', 'convert_image_class_dataset', 'warn_count']


def common_parser(description: str, size_limit: int, in_root: bool = True,
                  splits: str = 'train,val') -> ArgumentParser:
    """The options every converter takes (the reference's names and defaults)."""
    parser = ArgumentParser(description=description)
    if in_root:
        parser.add_argument('--in_root', type=str, required=True,
                            help='Directory holding the raw dataset')
    parser.add_argument('--out_root', type=str, required=True,
                        help='Directory (or remote URL) to write the MDS dataset to')
    parser.add_argument('--splits', type=str, default=splits,
                        help=f'Comma-separated splits to convert (default: {splits})')
    parser.add_argument('--compression', type=str, default='',
                        help='Shard compression, e.g. zstd:7 (default: none)')
    parser.add_argument('--hashes', type=str, default='sha1,xxh64',
                        help='Comma-separated shard hashes (default: sha1,xxh64)')
    parser.add_argument('--size_limit', type=int, default=size_limit,
                        help=f'Shard size limit in bytes (default: {size_limit})')
    parser.add_argument('--progress_bar', type=int, default=1, help='Show progress (1 or 0)')
    parser.add_argument('--leave', type=int, default=0,
                        help='Leave the progress bar on screen when done (1 or 0)')
    return parser


def _progress(items: Sequence[Any], progress_bar: bool, leave: bool) -> Any:
    if not progress_bar:
        return items
    from tqdm import tqdm
    return tqdm(items, leave=leave)


def convert_image_class_dataset(dataset: Any, out_root: str, split: str | None = None,
                                compression: str | None = None, hashes: list[str] | None = None,
                                size_limit: int = 1 << 24, progress_bar: bool = True,
                                leave: bool = False, encoding: str = 'pil') -> None:
    """Write an indexable dataset of ``(image, label)`` pairs to ``out_root/split`` as MDS.

    Samples are written in a random order with columns ``i`` (original index), ``x`` (the image,
    stored with ``encoding``) and ``y`` (the label).
    """
    indices = np.random.permutation(len(dataset)).tolist()
    out = os.path.join(out_root, split or '')
    with MDSWriter(out=out, columns={'i': 'int', 'x': encoding, 'y': 'int'},
                   compression=compression or None, hashes=hashes or [],
                   size_limit=size_limit, progress_bar=progress_bar) as writer:
        for i in _progress(indices, progress_bar, leave):
            x, y = dataset[i]
            writer.write({'i': i, 'x': x, 'y': int(y)})


def warn_count(name: str, split: str, got: int, expected: int) -> None:
    """Warn when a split does not have the official number of samples (e.g. a subset)."""
    if got != expected:
        warnings.warn(f'{name} {split}: {got} samples found, the full split has {expected}.',
                      stacklevel=2)
