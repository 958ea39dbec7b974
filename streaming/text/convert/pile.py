"""Convert the Pile (JSON lines) to MDS: columns ``text`` and ``pile_set_name`` (str).

``python -m streaming.text.convert.pile --in_root DIR --out_root OUT`` reads
``DIR/train/*.jsonl``, ``DIR/val.jsonl`` and ``DIR/test.jsonl`` (each line
``{"text": ..., "meta": {"pile_set_name": ...}}``), converts the files in parallel processes and
merges the train files' shards into one ``OUT/train`` dataset.
"""

from __future__ import annotations

import json
import os
import shutil
from argparse import Namespace
from collections import Counter
from glob import glob
from multiprocessing import Pool
from typing import Iterator

from streaming.format.index import load_index, write_index
from streaming.text.convert.common import text_parser
from streaming.util import get_list_arg
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'each_task', 'file_to_dir', 'get_list_arg', 'main',
           'merge_shard_groups', 'parse_args', 'with_id']

Task = tuple[str, str, str, list[str], int]


def parse_args() -> Namespace:
    """Command-line arguments."""
    return text_parser(__doc__.splitlines()[0], 'zstd:16', 1 << 27,
                       progress=False).parse_args()


def each_task(in_root: str, out_root: str, compression: str, hashes: list[str], size_limit: int,
              in_files: list[str]) -> Iterator[Task]:
    """One task per input file: it goes to the matching directory under ``out_root``."""
    for in_file in in_files:
        rel = os.path.relpath(in_file, in_root)
        if rel.startswith('..') or not rel.endswith('.jsonl'):
            raise ValueError(f'{in_file}: expected a .jsonl file under {in_root}.')
        yield in_file, os.path.join(out_root, rel[:-len('.jsonl')]), compression, hashes, \
            size_limit


def file_to_dir(task: Task) -> dict[str, int]:
    """Convert one JSONL file; returns how many samples each Pile subset had."""
    in_file, out_dir, compression, hashes, size_limit = task
    counts: Counter = Counter()
    with MDSWriter(out=out_dir, columns={'text': 'str', 'pile_set_name': 'str'},
                   compression=compression or None, hashes=hashes,
                   size_limit=size_limit) as writer, open(in_file, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            obj = json.loads(line)
            if sorted(obj) != ['meta', 'text'] or sorted(obj['meta']) != ['pile_set_name']:
                raise ValueError(f'{in_file}:{number}: expected {{"text": ..., "meta": '
                                 f'{{"pile_set_name": ...}}}}, got keys {sorted(obj)}.')
            name = obj['meta']['pile_set_name']
            writer.write({'text': obj['text'], 'pile_set_name': name})
            counts[name] += 1
    return dict(counts)


def with_id(basename: str, shard_id: int) -> str:
    """``shard.00003.mds.zstd`` renumbered to ``shard_id``."""
    parts = basename.split('.')
    parts[1] = f'{shard_id:05}'
    return '.'.join(parts)


def merge_shard_groups(root: str) -> None:
    """Move the shards of every subdirectory of ``root`` into ``root``, renumbered.

    One ``index.json`` covers them all; the subdirectories are removed.
    """
    shards = []
    for subdir in sorted(d for d in glob(os.path.join(root, '*')) if os.path.isdir(d)):
        for info in load_index(os.path.join(subdir, 'index.json'))['shards']:
            for key in ('raw_data', 'zip_data', 'raw_meta', 'zip_meta'):
                file_info = info.get(key)
                if not file_info:
                    continue
                old = file_info['basename']
                file_info['basename'] = with_id(old, len(shards))
                if os.path.exists(os.path.join(subdir, old)):
                    os.rename(os.path.join(subdir, old),
                              os.path.join(root, file_info['basename']))
            shards.append(info)
        shutil.rmtree(subdir)
    write_index(os.path.join(root, 'index.json'), shards)


def main(args: Namespace) -> None:
    """Convert every file, print each file's subset counts, merge the train shards."""
    in_files = sorted(glob(os.path.join(args.in_root, 'train', '*.jsonl')))
    in_files += [os.path.join(args.in_root, f'{split}.jsonl') for split in ('val', 'test')]
    tasks = list(each_task(args.in_root, args.out_root, args.compression,
                           get_list_arg(args.hashes), args.size_limit, in_files))
    with Pool() as pool:
        for in_file, counts in zip(in_files, pool.imap(file_to_dir, tasks)):
            print(json.dumps({'file': in_file, 'counts': counts}, sort_keys=True))
    merge_shard_groups(os.path.join(args.out_root, 'train'))


if __name__ == '__main__':
    main(parse_args())
