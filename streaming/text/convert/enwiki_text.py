"""Convert English Wikipedia text (one passage per line) to MDS: column ``text`` (str).

``python -m streaming.text.convert.enwiki_text --in_root DIR --out_root OUT`` reads
``DIR/part-00000-of-00500`` ... ``part-00499-of-00500`` into ``OUT/train`` and ``DIR/eval.txt``
into ``OUT/val``; blank lines are skipped.
"""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Iterator

from streaming.text.convert.common import text_parser, write_split
from streaming.util import get_list_arg
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'get_list_arg', 'main', 'parse_args', 'process_split']


def parse_args() -> Namespace:
    """Command-line arguments."""
    return text_parser(__doc__.splitlines()[0], 'zstd:7', 1 << 25).parse_args()


def _lines(in_root: str, basenames: list[str]) -> Iterator[dict[str, str]]:
    for basename in basenames:
        path = os.path.join(in_root, basename)
        if not os.path.exists(path):
            raise FileNotFoundError(f'enwiki input file not found: {path}')
        with open(path, encoding='utf-8') as f:
            for line in f:
                if line.strip():
                    yield {'text': line.strip()}


def process_split(in_root: str, out_root: str, compression: str, hashes: list[str],
                  size_limit: int, progress_bar: int, leave: int, basenames: list[str],
                  split: str) -> None:
    """Write the lines of ``basenames`` to ``out_root/split``."""
    write_split(os.path.join(out_root, split), {'text': 'str'}, _lines(in_root, basenames),
                compression, ','.join(hashes), size_limit, bool(progress_bar), bool(leave))


def main(args: Namespace) -> None:
    """Convert the train parts and the eval file."""
    hashes = get_list_arg(args.hashes)
    parts = [f'part-{i:05}-of-00500' for i in range(500)]
    process_split(args.in_root, args.out_root, args.compression, hashes, args.size_limit,
                  args.progress_bar, args.leave, parts, 'train')
    process_split(args.in_root, args.out_root, args.compression, hashes, args.size_limit,
                  args.progress_bar, args.leave, ['eval.txt'], 'val')


if __name__ == '__main__':
    main(parse_args())
