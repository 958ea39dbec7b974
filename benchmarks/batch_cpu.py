"""CPU per GB of one shuffled epoch read from local shards, batch by batch, with DataLoader workers.

``python -m benchmarks.batch_cpu [PATH] [--batch-size 32] [--workers 2] [--repeats 3]
[--cache-limit BYTES]``

PATH defaults to ``link_bench``'s copy of the tokens dataset (``benchmarks/.data/link/ours/
tokens-500000``: 150,000 samples of 2 KiB in 619 MDS shards of 500 KB), so that the per-batch
CPU of the link's tokens case can be measured without the link (docs/benchmarks.md, issue 31).
Each repeat is a new ``StreamingDataset(local=PATH, shuffle=True)`` and ``StreamingDataLoader``
(fresh workers, as in ``link_bench``); the CPU is the whole job's (``harness.job_cpu_s``:
this process, its workers) from the loader's first batch request to its last batch, divided by
the bytes of the ``bytes`` columns read; ``main_cpu_s_per_gb`` is the main process's share (the
rest is the workers'). With ``--cache-limit`` (bytes, or a size such as ``64mb``), PATH is the
remote of ``StreamingDataset(remote=PATH, local=<new temporary directory>, cache_limit=...)``
instead: the shards are copied in and evicted under the limit, and that CPU counts too (the
cache's own work under a limit); the output then adds the node's egress (bytes copied in). Run
it under ``flock /work/bench.lock`` and note the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from typing import Any

from benchmarks.cases.harness import job_cpu_s
from streaming import StreamingDataLoader, StreamingDataset

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), '.data', 'link', 'ours',
                            'tokens-500000')


def epoch(path: str, batch_size: int, workers: int, seed: int,
          cache_limit: str | None = None) -> dict[str, Any]:
    """One epoch: CPU-s/GB of the job and of the main process, MB/s, batches (and egress,
    under ``cache_limit``)."""
    if cache_limit is None:
        local = None
        dataset = StreamingDataset(local=path, shuffle=True, batch_size=batch_size,
                                   shuffle_seed=seed)
    else:
        local = tempfile.mkdtemp(prefix='batch-cpu-')
        dataset = StreamingDataset(remote=path, local=local, shuffle=True,
                                   batch_size=batch_size, shuffle_seed=seed,
                                   cache_limit=cache_limit)
    try:
        return _timed(dataset, batch_size, workers)
    finally:
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)


def _timed(dataset: StreamingDataset, batch_size: int, workers: int) -> dict[str, Any]:
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
    started, cpu_before, main_before = time.perf_counter(), job_cpu_s(), _main_cpu_s()
    total = batches = 0
    for batch in loader:
        total += sum(len(value) for values in batch.values() if isinstance(values, list)
                     for value in values if isinstance(value, bytes))
        batches += 1
    cpu, wall = job_cpu_s() - cpu_before, time.perf_counter() - started
    main = _main_cpu_s() - main_before
    result = {'cpu_s_per_gb': round(cpu / (total / 1e9), 2),
              'main_cpu_s_per_gb': round(main / (total / 1e9), 2),
              'mb_per_s': round(total / 1e6 / wall, 1), 'batches': batches,
              'load': os.getloadavg()[0]}
    if dataset.cache.limit is not None:
        result['egress_bytes'] = dataset.cache.egress()[0]
    del loader
    return result


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
    parser.add_argument('--cache-limit', default=None,
                        help='read PATH as a remote into a new local directory under this limit')
    args = parser.parse_args()
    for repeat in range(args.repeats):
        print(json.dumps(epoch(args.path, args.batch_size, args.workers, 7 + repeat,
                               args.cache_limit)), flush=True)


if __name__ == '__main__':
    main()
