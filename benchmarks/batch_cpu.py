"""CPU per GB of one shuffled epoch read from local shards, batch by batch, with DataLoader workers.

``python -m benchmarks.batch_cpu [PATH] [--batch-size 32] [--workers 2] [--repeats 3]``

PATH defaults to ``link_bench``'s copy of the tokens dataset (``benchmarks/.data/link/ours/
tokens-500000``: 150,000 samples of 2 KiB in 619 MDS shards of 500 KB), so that the per-batch
CPU of the link's tokens case can be measured without the link (docs/benchmarks.md, issue 31).
Each repeat is a new ``StreamingDataset(local=PATH, shuffle=True)`` and ``StreamingDataLoader``
(fresh workers, as in ``link_bench``); the CPU is the whole job's (``harness.job_cpu_s``:
this process, its workers) from the loader's first batch request to its last batch, divided by
the bytes of the ``bytes`` columns read; ``main_cpu_s_per_gb`` is the main process's share (the
rest is the workers'). Run it under ``flock /work/bench.lock`` and note the
load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from typing import Any

from benchmarks.cases.harness import job_cpu_s
from streaming import StreamingDataLoader, StreamingDataset

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), '.data', 'link', 'ours',
                            'tokens-500000')


def epoch(path: str, batch_size: int, workers: int, seed: int) -> dict[str, Any]:
    """One epoch: CPU-s/GB of the job and of the main process, MB/s, batches."""
    dataset = StreamingDataset(local=path, shuffle=True, batch_size=batch_size,
                               shuffle_seed=seed)
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
    started, cpu_before, main_before = time.perf_counter(), job_cpu_s(), _main_cpu_s()
    total = batches = 0
    for batch in loader:
        total += sum(len(value) for values in batch.values() if isinstance(values, list)
                     for value in values if isinstance(value, bytes))
        batches += 1
    cpu, wall = job_cpu_s() - cpu_before, time.perf_counter() - started
    main = _main_cpu_s() - main_before
    del loader
    return {'cpu_s_per_gb': round(cpu / (total / 1e9), 2),
            'main_cpu_s_per_gb': round(main / (total / 1e9), 2),
            'mb_per_s': round(total / 1e6 / wall, 1), 'batches': batches,
            'load': os.getloadavg()[0]}


def _main_cpu_s() -> float:
    """User + system CPU seconds of this process (every thread), not of its workers."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('path', nargs='?', default=DEFAULT_PATH)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    for repeat in range(args.repeats):
        print(json.dumps(epoch(args.path, args.batch_size, args.workers, 7 + repeat)), flush=True)


if __name__ == '__main__':
    main()
