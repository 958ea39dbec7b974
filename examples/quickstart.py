"""Quickstart: write a small dataset as MDS shards, then read it back through a DataLoader.

    python examples/quickstart.py [--samples 5000] [--keep DIR]

1. ``MDSWriter`` turns a few thousand dict samples (an int id, a string, and a variable-length
   int32 token array) into zstd-compressed shards plus an ``index.json`` in a "remote" directory.
2. ``LocalDataset`` opens that directory; a torch ``DataLoader`` with two worker processes reads
   it in batches of 32. Each shard is decompressed next to its ``.zstd`` file on first access.
3. Every sample must come back exactly once and equal to what was written.

``StreamingDataset`` (download from a remote into a local cache, shuffling, resumption) is still
being built; until it lands, ``LocalDataset`` reads a dataset directory in place.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
from torch.utils.data import DataLoader

from streaming import LocalDataset, MDSWriter

COLUMNS = {'id': 'int', 'text': 'str', 'tokens': 'ndarray:int32'}
WORDS = ['stream', 'shard', 'sample', 'index', 'epoch', 'batch', 'worker', 'cache', 'zstd',
         'münchen', 'naïve', '数据', '🚀']


def make_sample(i: int) -> dict:
    """Sample ``i``, the same every time it is asked for (so reads can be checked)."""
    rng = np.random.default_rng(i)
    text = ' '.join(rng.choice(WORDS, size=int(rng.integers(1, 12))))
    tokens = rng.integers(0, 50_000, size=int(rng.integers(1, 256)), dtype=np.int32)
    return {'id': i, 'text': f'{i}: {text}', 'tokens': tokens}


def collate(samples: list[dict]) -> dict:
    """Keep each batch as lists: token arrays have different lengths, so they cannot be stacked."""
    return {key: [sample[key] for sample in samples] for key in COLUMNS}


def write(remote: str, num_samples: int) -> None:
    with MDSWriter(out=remote, columns=COLUMNS, compression='zstd', hashes=['sha1', 'xxh64'],
                   size_limit='256kb') as writer:
        for i in range(num_samples):
            writer.write(make_sample(i))


def read_and_check(remote: str, num_samples: int) -> int:
    """Read every sample through a DataLoader and compare it with what was written."""
    dataset = LocalDataset(remote)
    assert len(dataset) == num_samples, f'expected {num_samples} samples, found {len(dataset)}'
    loader = DataLoader(dataset, batch_size=32, num_workers=2, collate_fn=collate)
    seen = np.zeros(num_samples, np.int64)
    batches = 0
    for batch in loader:
        batches += 1
        for i, text, tokens in zip(batch['id'], batch['text'], batch['tokens']):
            expected = make_sample(i)
            assert text == expected['text'], f'sample {i}: text differs'
            assert tokens.dtype == np.int32 and np.array_equal(tokens, expected['tokens']), \
                f'sample {i}: tokens differ'
            seen[i] += 1
    missing, repeated = np.flatnonzero(seen == 0), np.flatnonzero(seen > 1)
    assert not len(missing) and not len(repeated), \
        f'{len(missing)} samples missing, {len(repeated)} read more than once'
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--samples', type=int, default=5000, help='number of samples to write')
    parser.add_argument('--keep', metavar='DIR',
                        help='write the dataset to DIR/remote (absent or empty) and keep it')
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix='streaming-quickstart-') as tmp:
        remote = os.path.join(args.keep or tmp, 'remote')

        start = time.perf_counter()
        write(remote, args.samples)
        write_secs = time.perf_counter() - start
        with open(os.path.join(remote, 'index.json')) as f:
            shards = json.load(f)['shards']
        raw_bytes = sum(shard['raw_data']['bytes'] for shard in shards)
        zip_bytes = sum(shard['zip_data']['bytes'] for shard in shards)

        start = time.perf_counter()
        batches = read_and_check(remote, args.samples)
        read_secs = time.perf_counter() - start

        print(f'wrote {args.samples} samples into {len(shards)} zstd shard(s) in {write_secs:.2f}s '
              f'({raw_bytes / 1024:.0f} KiB raw, {zip_bytes / 1024:.0f} KiB compressed)')
        print(f'read them back in {batches} batches of up to 32 with 2 workers in {read_secs:.2f}s')
        print(f'OK: all {args.samples} samples came back exactly once and unchanged')
        if args.keep:
            print(f'dataset kept in {remote}')


if __name__ == '__main__':
    main()
