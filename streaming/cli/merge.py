"""Merge the indexes of sub-datasets into one: ROOT/index.json lists every shard of ROOT/*/.

ROOT is a local directory or a remote URL whose subdirectories each hold a dataset (as written
by parallel writers, Spark tasks or ``write_parallel``).

For example:
  streaming merge /data/parts
"""

from __future__ import annotations

import argparse

from streaming.cli.common import emit
from streaming.dataset_dir import DatasetDir

HELP = 'merge the indexes of the sub-datasets under ROOT into ROOT/index.json'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('root', help='directory (local or remote) whose subdirectories hold '
                        'datasets')
    parser.add_argument('--download-timeout', type=float, default=60,
                        help='seconds to wait for each remote index (default 60)')


def run(args: argparse.Namespace) -> int:
    from streaming.merge import merge_index
    merge_index(args.root, keep_local=True, download_timeout=args.download_timeout)
    ds = DatasetDir(args.root)
    shards = ds.index['shards']
    parts = sorted({e['raw_data']['basename'].split('/')[0] for e in shards})
    ds.close()
    emit(args, {'root': args.root, 'parts': parts, 'shards': len(shards),
                'samples': sum(e['samples'] for e in shards)},
         f'merged {len(parts)} sub-datasets: {len(shards)} shards, '
         f'{sum(e["samples"] for e in shards)} samples -> {args.root}/index.json')
    return 0
