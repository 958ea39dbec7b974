"""Merge the ``group-*`` datasets written in parallel into one dataset.

``python -m streaming.text.convert.enwiki.mds.merge_shard_groups --in_root DIR --out_root OUT``
moves every group's shards into ``OUT`` (renumbered in group order), writes one ``index.json``
and removes ``DIR``.
"""

from __future__ import annotations

import os
import shutil
from argparse import ArgumentParser, Namespace
from glob import glob

from streaming.text.convert.pile import merge_shard_groups

__all__ = ['main', 'parse_args']


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--in_root', type=str, required=True,
                        help='Directory holding the group-* datasets')
    parser.add_argument('--out_root', type=str, required=True,
                        help='Directory to write the merged dataset to (must not exist)')
    return parser.parse_args()


def main(args: Namespace) -> None:
    """Merge, then remove the input directory."""
    os.makedirs(args.out_root)
    for group in sorted(glob(os.path.join(args.in_root, 'group-*'))):
        shutil.move(group, os.path.join(args.out_root, os.path.basename(group)))
    merge_shard_groups(args.out_root)
    shutil.rmtree(args.in_root)


if __name__ == '__main__':
    main(parse_args())
