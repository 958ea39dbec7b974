"""Pick evenly spaced samples of a local MDS dataset into a new, smaller one (an eval split).

``python -m streaming.text.convert.enwiki.mds.pick_eval_samples --in_root DIR --out_root OUT
--num_examples_to_pick N``.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace

import numpy as np

from streaming.local_dataset import LocalDataset
from streaming.util import get_list_arg
from streaming.writing import MDSWriter

# The reference's script used StreamingDataset; the local map-style reader does the same job.
StreamingDataset = LocalDataset

__all__ = ['MDSWriter', 'StreamingDataset', 'main', 'parse_args']

COLUMNS = {name: 'bytes' for name in ('input_ids', 'input_mask', 'segment_ids',
                                      'masked_lm_positions', 'masked_lm_ids',
                                      'masked_lm_weights', 'next_sentence_labels')}


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--in_root', type=str, required=True)
    parser.add_argument('--out_root', type=str, required=True)
    parser.add_argument('--compression', type=str, default='zstd:16')
    parser.add_argument('--hashes', type=str, default='sha1,xxh3_64')
    parser.add_argument('--size_limit', type=int, default=1 << 26)
    parser.add_argument('--num_examples_to_pick', type=int, default=10000)
    return parser.parse_args()


def main(args: Namespace) -> None:
    """Write ``num_examples_to_pick`` evenly spaced samples of ``in_root`` to ``out_root``."""
    dataset = StreamingDataset(args.in_root)
    count = min(args.num_examples_to_pick, len(dataset))
    picks = np.linspace(0, len(dataset), count, endpoint=False).astype(np.int64)
    with MDSWriter(out=args.out_root, columns=COLUMNS, compression=args.compression or None,
                   hashes=get_list_arg(args.hashes), size_limit=args.size_limit) as writer:
        for i in picks.tolist():
            sample = dataset[i]
            writer.write({name: sample[name] for name in COLUMNS})


if __name__ == '__main__':
    main(parse_args())
