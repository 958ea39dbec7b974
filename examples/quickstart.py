"""Quickstart: write a small dataset as MDS shards, then stream it through a DataLoader.

    python examples/quickstart.py [--samples 5000] [--keep DIR]

1. ``MDSWriter`` turns a few thousand dict samples (an int id, a string, and a variable-length
   int32 token array) into zstd-compressed shards plus an ``index.json`` in a "remote" directory
   (any object-store URL works the same way).
2. ``StreamingDataset`` downloads shards from that remote into a local cache as they are needed
   and decompresses them; a ``StreamingDataLoader`` with two worker processes reads shuffled
   batches of 32. Every sample must come back exactly once and equal to what was written.
3. A second pass stops half-way, saves ``state_dict()``, and a fresh loader resumes from it: the
   two halves together are exactly that epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset

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


def check(ids: list[int], texts: list[str], tokens: list[np.ndarray], num_samples: int) -> None:
    """Every sample exactly once, equal to what was written."""
    seen = np.zeros(num_samples, np.int64)
    for i, text, toks in zip(ids, texts, tokens):
        expected = make_sample(i)
        assert text == expected['text'], f'sample {i}: text differs'
        assert toks.dtype == np.int32 and np.array_equal(toks, expected['tokens']), \
            f'sample {i}: tokens differ'
        seen[i] += 1
    missing, repeated = np.flatnonzero(seen == 0), np.flatnonzero(seen > 1)
    assert not len(missing) and not len(repeated), \
        f'{len(missing)} samples missing, {len(repeated)} read more than once'


def stream(remote: str, cache: str) -> StreamingDataLoader:
    dataset = StreamingDataset(remote=remote, local=cache, batch_size=32, shuffle=True)
    return StreamingDataLoader(dataset, batch_size=32, num_workers=2, collate_fn=collate)


def read_and_check(remote: str, cache: str, num_samples: int) -> int:
    """Stream one epoch through the loader and compare every sample with what was written."""
    loader = stream(remote, cache)
    assert len(loader.dataset) == num_samples, f'expected {num_samples} samples'
    ids, texts, tokens, batches = [], [], [], 0
    for batch in loader:
        batches += 1
        ids += batch['id']
        texts += batch['text']
        tokens += batch['tokens']
    check(ids, texts, tokens, num_samples)
    return batches


def resume_half_way(remote: str, cache: str, num_samples: int) -> None:
    """Checkpoint mid-epoch, resume in a new loader, and check the epoch adds up exactly."""
    loader = stream(remote, cache)
    first: list[int] = []
    for batch in loader:
        first += batch['id']
        if len(first) >= num_samples // 2:
            break
    state = loader.state_dict()
    resumed = stream(remote, cache)
    resumed.load_state_dict(state)
    rest = [i for batch in resumed for i in batch['id']]
    assert sorted(first + rest) == list(range(num_samples)), 'resumption lost or repeated samples'
    print(f'resumed at sample {state["sample_in_epoch"]} of epoch {state["epoch"]}: '
          f'{len(first)} + {len(rest)} samples, each exactly once')


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

        cache = os.path.join(tmp, 'cache')
        start = time.perf_counter()
        batches = read_and_check(remote, cache, args.samples)
        read_secs = time.perf_counter() - start

        print(f'wrote {args.samples} samples into {len(shards)} zstd shard(s) in {write_secs:.2f}s '
              f'({raw_bytes / 1024:.0f} KiB raw, {zip_bytes / 1024:.0f} KiB compressed)')
        print(f'streamed them back shuffled in {batches} batches of up to 32 with 2 workers in '
              f'{read_secs:.2f}s')
        print(f'OK: all {args.samples} samples came back exactly once and unchanged')
        resume_half_way(remote, cache, args.samples)
        if args.keep:
            print(f'dataset kept in {remote}')


if __name__ == '__main__':
    main()
