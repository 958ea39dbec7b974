"""Shared parts of the text converters: command-line options and writing samples."""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any, Iterable

from streaming.util import get_list_arg
from streaming.writing import MDSWriter

__all__ = ['split_dir', 'text_parser', 'write_split']


def text_parser(description: str, compression: str, size_limit: int, in_root: bool = True,
                progress: bool = True) -> ArgumentParser:
    """The options the text converters share (the reference's names and defaults)."""
    parser = ArgumentParser(description=description)
    parser.add_argument('--in_root', type=str, required=in_root, default=None,
                        help='Directory holding the raw dataset')
    parser.add_argument('--out_root', type=str, required=True,
                        help='Directory (or remote URL) to write the MDS dataset to')
    parser.add_argument('--compression', type=str, default=compression,
                        help=f'Shard compression (default: {compression}; "" for none)')
    parser.add_argument('--hashes', type=str, default='sha1,xxh64',
                        help='Comma-separated shard hashes (default: sha1,xxh64)')
    parser.add_argument('--size_limit', type=int, default=size_limit,
                        help=f'Shard size limit in bytes (default: {size_limit})')
    if progress:
        parser.add_argument('--progress_bar', type=int, default=1, help='Show progress (1/0)')
        parser.add_argument('--leave', type=int, default=0,
                            help='Leave the progress bar on screen when done (1 or 0)')
    return parser


def write_split(out: str, columns: dict[str, str], samples: Iterable[dict[str, Any]],
                compression: str, hashes: str, size_limit: int, progress_bar: bool = False,
                leave: bool = False, total: int | None = None) -> int:
    """Write ``samples`` to ``out`` as MDS; returns how many were written."""
    if progress_bar:
        from tqdm import tqdm
        samples = tqdm(samples, leave=leave, total=total)
    count = 0
    with MDSWriter(out=out, columns=columns, compression=compression or None,
                   hashes=get_list_arg(hashes), size_limit=size_limit,
                   progress_bar=progress_bar) as writer:
        for sample in samples:
            writer.write(sample)
            count += 1
    return count


def split_dir(root: str, split: str) -> str:
    """``root/split`` for a path or a URL."""
    return root.rstrip('/') + '/' + split if '://' in root else os.path.join(root, split)
