"""Parallel conversion: ``write_parallel`` with N processes vs one process writing, zstd data.

    .venv/bin/python benchmarks/convert_bench.py                    # 2 workers, 3 repeats
    .venv/bin/python benchmarks/convert_bench.py --samples 100000 --workers 2 4 --repeats 5

Every measurement runs in a fresh process, alternating between the configurations, and the
medians are compared. The samples (text from a fixed vocabulary plus an int32 token array, so
zstd has real work) are generated inside the writing process in both cases:

- ``single``: one process, one ``MDSWriter`` (which already compresses on a thread pool);
- ``parallel-N``: ``write_parallel`` with N worker processes, each generating and writing its
  part, then ``merge_index``; the time includes starting the processes and merging.

The result (speedup = single median / parallel median) is printed and written as JSON, with
each run's CPU seconds and the 1-minute load average: a speedup needs idle cores, so compare
runs on a quiet machine (a load above the core count means other work is taking the CPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COLUMNS = {'id': 'int', 'text': 'str', 'tokens': 'ndarray:int32'}
OPTIONS = {'compression': 'zstd', 'hashes': ['xxh64'], 'size_limit': 1 << 24}


def samples(part: int, parts: int, total: int):
    """The ``part``-th contiguous run of ``total`` deterministic samples."""
    import numpy as np
    rng = np.random.default_rng(part)
    vocab = np.array([f'w{i}' for i in range(5000)])
    start, stop = part * total // parts, (part + 1) * total // parts
    for i in range(start, stop):
        words = vocab[rng.zipf(1.3, 60) % 5000]
        yield {'id': i, 'text': ' '.join(words.tolist()),
               'tokens': rng.integers(0, 50_000, 256, dtype=np.int32)}


def _cpu() -> float:
    import resource
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def measure(config: str, total: int, out: str) -> tuple[float, float]:
    """(wall, CPU) seconds to write ``total`` samples to ``out`` with ``config``."""
    cpu = _cpu()
    start = time.perf_counter()
    if config == 'single':
        from streaming import MDSWriter
        with MDSWriter(out=out, columns=COLUMNS, **OPTIONS) as writer:
            for sample in samples(0, 1, total):
                writer.write(sample)
    else:
        from streaming.convert import write_parallel
        workers = int(config.split('-')[1])
        write_parallel(partial(samples, total=total), out, columns=COLUMNS, workers=workers,
                       progress_bar=False, **OPTIONS)
    return time.perf_counter() - start, _cpu() - cpu


def _child(config: str, total: int) -> tuple[float, float]:
    out = tempfile.mkdtemp(prefix='convert-bench-')
    try:
        proc = subprocess.run([sys.executable, __file__, '--child', config, '--samples',
                               str(total), '--out', out], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f'{config} failed:\n{proc.stderr[-3000:]}')
        wall, cpu = proc.stdout.strip().splitlines()[-1].split()
        return float(wall), float(cpu)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=60_000)
    parser.add_argument('--workers', type=int, nargs='+', default=[2])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--json', default='benchmarks/results/convert.json')
    parser.add_argument('--child')
    parser.add_argument('--out')
    args = parser.parse_args()
    if args.child:
        # Re-import through the package path so spawned workers can pickle ``samples``.
        from benchmarks import convert_bench
        print(*convert_bench.measure(args.child, args.samples, args.out))
        return
    configs = ['single'] + [f'parallel-{n}' for n in args.workers]
    times: dict[str, list[float]] = {c: [] for c in configs}
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    load = []
    for repeat in range(args.repeats):
        for config in configs:
            wall, used = _child(config, args.samples)
            times[config].append(wall)
            cpu[config].append(used)
            load.append(os.getloadavg()[0])
            print(f'repeat {repeat + 1}: {config}: {wall:.2f}s wall, {used:.2f}s CPU, load '
                  f'{load[-1]:.1f}', flush=True)
    medians = {c: statistics.median(t) for c, t in times.items()}
    result = {'samples': args.samples, 'cpus': os.cpu_count(), 'repeats': args.repeats,
              'load_average_1min': load, 'cpu_seconds': cpu,
              'seconds': times, 'median_seconds': medians,
              'samples_per_s': {c: args.samples / m for c, m in medians.items()},
              'speedup_vs_single': {c: medians['single'] / m for c, m in medians.items()}}
    for config in configs:
        print(f'{config:>12}: median {medians[config]:.2f}s, '
              f'{args.samples / medians[config]:,.0f} samples/s, '
              f'speedup {result["speedup_vs_single"][config]:.2f}x')
    os.makedirs(os.path.dirname(args.json) or '.', exist_ok=True)
    with open(args.json, 'w') as f:
        json.dump(result, f, indent=2)


if __name__ == '__main__':
    main()
