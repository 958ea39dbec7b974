"""Where a cold epoch set-up goes, and the floor the reference's exact order puts under it.

On an index-only scale dataset (``python -m benchmarks.run`` generates them under
``benchmarks/.data/full/ours/scale-*``), each in a fresh process, ``--repeats`` times:

- ``init``: ``StreamingDataset(...)`` with no set-up caches (the index parsed and checked, its
  binary summary written);
- ``first sample``: from the start to the first sample (``init`` plus the epoch's order up to
  its first final window);
- ``fisher-yates``: only the part of the order that cannot be skipped or split: numpy's
  ``Generator.shuffle`` over every span of the epoch, one span after another, as the reference
  draws them (which sample comes first depends on the generator's state after the last span).

    .venv/bin/python benchmarks/cold_setup.py benchmarks/.data/full/ours/scale-100M
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time


def child(path: str) -> dict[str, float]:
    import numpy as np

    from streaming import StreamingDataset
    from streaming.dataset.cache_dirs import setup_cache_dir

    shutil.rmtree(setup_cache_dir(path), ignore_errors=True)
    start = time.perf_counter()
    dataset = StreamingDataset(local=path, batch_size=256, shuffle=True)
    built = time.perf_counter()
    next(iter(dataset))
    first = time.perf_counter()
    sizes = np.array([shard.samples for shard in dataset.shards], np.int64)
    ids = np.arange(int(sizes.sum()), dtype=np.int32)
    rng = np.random.default_rng(dataset.shuffle_seed)
    begin = time.perf_counter()
    offset = 0
    for size in sizes.tolist():
        rng.shuffle(ids[offset:offset + size])
        offset += size
    shuffled = time.perf_counter() - begin
    return {'init_s': built - start, 'first_sample_s': first - start, 'fisher_yates_s': shuffled,
            'samples': int(sizes.sum()), 'shards': len(sizes)}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == '--child':
        print(json.dumps(child(sys.argv[2])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('path', help='an index-only scale dataset written by ours')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, __file__, '--child', args.path], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{runs[0]['samples']:,} samples in {runs[0]['shards']:,} shards, medians of "
          f'{args.repeats} fresh processes:')
    for key in ('init_s', 'first_sample_s', 'fisher_yates_s'):
        values = [run[key] for run in runs]
        print(f'  {key:15} {statistics.median(values):6.2f} s  '
              f'({min(values):.2f}-{max(values):.2f})')


if __name__ == '__main__':
    main()
