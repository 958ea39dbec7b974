"""Convert C4 (English) to MDS: columns ``text``, ``timestamp``, ``url`` (all str).

``python -m streaming.text.convert.c4 --out_root OUT`` reads C4 from the Hugging Face hub
(``datasets``, streamed); with ``--in_root DIR`` it reads local copies of the released files
instead (``DIR/**/c4-train.*.json[.gz]`` and ``c4-validation.*``, one JSON object per line).
Split ``train`` is written to ``OUT/train`` and ``validation`` to ``OUT/val``.
"""

from __future__ import annotations

import gzip
import json
import os
from argparse import Namespace
from glob import glob
from typing import Any, Iterable, Iterator

from streaming.text.convert.common import split_dir, text_parser, write_split
from streaming.util import get_list_arg
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'each', 'get', 'get_list_arg', 'main', 'parse_args']

COLUMNS = {'text': 'str', 'timestamp': 'str', 'url': 'str'}
# (hub split, output split, samples in the full split)
SPLITS = [('train', 'train', 364868892), ('validation', 'val', 364608)]


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = text_parser(__doc__.splitlines()[0], 'zstd:7', 1 << 27, in_root=False)
    parser.add_argument('--batch_size', type=int, default=512,
                        help='Samples read per batch from the hub')
    parser.add_argument('--splits', type=str, default='train,validation',
                        help='Splits to convert (train,validation)')
    return parser.parse_args()


def _local_files(in_root: str, split: str) -> list[str]:
    files = sorted(glob(os.path.join(in_root, '**', f'c4-{split}.*.json*'), recursive=True))
    if not files:
        raise FileNotFoundError(f'No C4 files c4-{split}.*.json[.gz] under {in_root}.')
    return files


def _read_jsonl(paths: list[str]) -> Iterator[dict[str, Any]]:
    for path in paths:
        opener = gzip.open if path.endswith('.gz') else open
        with opener(path, 'rt', encoding='utf-8') as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def get(split: str, in_root: str | None = None) -> Iterable[dict[str, Any]]:
    """The split's samples: from local files under ``in_root``, else streamed from the hub."""
    if in_root is not None:
        return _read_jsonl(_local_files(in_root, split))
    try:
        import datasets
    except ImportError as error:
        raise ImportError('Reading C4 from the hub needs the datasets package (pip install '
                          'datasets), or pass --in_root with local files.') from error
    return datasets.load_dataset(path='allenai/c4', name='en', split=split, streaming=True)


def each(dataset: Iterable[dict[str, Any]], num_workers: int = 1,
         batch_size: int = 512) -> Iterator[dict[str, Any]]:
    """The MDS sample of each record (its text, timestamp and url, as str)."""
    del num_workers, batch_size  # Records are read in order; kept for the reference's callers.
    for record in dataset:
        yield {key: str(record[key]) for key in COLUMNS}


def main(args: Namespace) -> None:
    """Convert each split."""
    wanted = set(get_list_arg(args.splits or 'train,validation'))
    for source, target, total in SPLITS:
        if source not in wanted:
            continue
        write_split(split_dir(args.out_root, target), COLUMNS,
                    each(get(source, args.in_root), batch_size=args.batch_size),
                    args.compression, args.hashes, args.size_limit, bool(args.progress_bar),
                    bool(args.leave), None if args.in_root else total)


if __name__ == '__main__':
    main(parse_args())
