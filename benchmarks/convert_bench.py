"""Parallel conversion: ``write_parallel`` with N processes vs one process writing, zstd data.

    .venv/bin/python benchmarks/convert_bench.py                    # 2 workers, 3 repeats
    .venv/bin/python benchmarks/convert_bench.py --samples 100000 --workers 2 4 --repeats 5

Every measurement runs in a fresh process, alternating between the configurations, and the
medians are compared. The samples (text from a fixed vocabulary plus an int32 token array, so
zstd has real work) are generated inside the writing process in both cases:

- ``single``: one process, one ``MDSWriter`` (which already compresses on a thread pool);
- ``parallel-N``: ``write_parallel`` with N worker processes, each generating and writing its
  part, then ``merge_index``; the time includes starting the processes and merging.

The single writer already compresses shards on a thread pool, so it is not confined to one
core: with a share ``s`` of its CPU time on the main thread, N processes on 2 cores can be at
most ``2 * s`` times faster. The script measures ``s`` and prints that bound.

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


def jsonl_corpus(total: int) -> str:
    """A jsonl file of ``total`` web-document-like records (made once, kept in the temp dir)."""
    import numpy as np
    path = os.path.join(tempfile.gettempdir(), f'convert-bench-{total}.jsonl')
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        vocab = np.array([f'w{i}' for i in range(5000)])
        with open(path + '.tmp', 'w') as f:
            for i in range(total):
                words = vocab[rng.zipf(1.3, 120) % 5000]
                f.write(json.dumps({'id': i, 'url': f'https://example.com/{i}',
                                    'text': ' '.join(words.tolist()),
                                    'score': float(rng.random())}) + '\n')
        os.replace(path + '.tmp', path)
    return path


def measure(config: str, total: int, out: str, workload: str) -> tuple[float, float, float]:
    """(wall, CPU, main-thread CPU) seconds to write ``total`` samples with ``config``."""
    if workload == 'jsonl':
        from streaming.convert.sources import infer_columns, open_source
        parts = 1 if config == 'single' else int(config.split('-')[1])
        source = open_source(jsonl_corpus(total), 'jsonl', parts=parts)
        columns = infer_columns(source)
    else:
        source, columns = partial(samples, total=total), COLUMNS
    cpu, main = _cpu(), time.thread_time()
    start = time.perf_counter()
    if config == 'single':
        from streaming import MDSWriter
        with MDSWriter(out=out, columns=columns, **OPTIONS) as writer:
            for sample in source(0, 1):
                writer.write(sample)
    else:
        from streaming.convert import write_parallel
        workers = int(config.split('-')[1])
        write_parallel(source, out, columns=columns, workers=workers, progress_bar=False,
                       **OPTIONS)
    return time.perf_counter() - start, _cpu() - cpu, time.thread_time() - main


def _child(config: str, total: int, workload: str) -> tuple[float, float, float]:
    out = tempfile.mkdtemp(prefix='convert-bench-')
    try:
        proc = subprocess.run([sys.executable, __file__, '--child', config, '--samples',
                               str(total), '--out', out, '--workload', workload],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f'{config} failed:\n{proc.stderr[-3000:]}')
        wall, cpu, main = proc.stdout.strip().splitlines()[-1].split()
        return float(wall), float(cpu), float(main)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=60_000)
    parser.add_argument('--workers', type=int, nargs='+', default=[2])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--workload', choices=('synthetic', 'jsonl'), default='synthetic',
                        help='synthetic: text + token arrays made in the writing process; '
                        'jsonl: a jsonl corpus converted as `streaming convert` does')
    parser.add_argument('--json', default='benchmarks/results/convert.json')
    parser.add_argument('--child')
    parser.add_argument('--out')
    args = parser.parse_args()
    if args.child:
        # Re-import through the package path so spawned workers can pickle ``samples``.
        from benchmarks import convert_bench
        print(*convert_bench.measure(args.child, args.samples, args.out, args.workload))
        return
    if args.workload == 'jsonl':
        jsonl_corpus(args.samples)  # Made before any timing.
    configs = ['single'] + [f'parallel-{n}' for n in args.workers]
    times: dict[str, list[float]] = {c: [] for c in configs}
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    main_share = []
    load = []
    for repeat in range(args.repeats):
        for config in configs:
            wall, used, main = _child(config, args.samples, args.workload)
            times[config].append(wall)
            cpu[config].append(used)
            if config == 'single':
                main_share.append(main / used)
            load.append(os.getloadavg()[0])
            print(f'repeat {repeat + 1}: {config}: {wall:.2f}s wall, {used:.2f}s CPU, load '
                  f'{load[-1]:.1f}', flush=True)
    medians = {c: statistics.median(t) for c, t in times.items()}
    share = statistics.median(main_share)
    result = {'workload': args.workload, 'samples': args.samples, 'cpus': os.cpu_count(),
              'repeats': args.repeats, 'single_main_thread_cpu_share': share,
              'speedup_bound_on_2_cores': 2 * share,
              'load_average_1min': load, 'cpu_seconds': cpu,
              'seconds': times, 'median_seconds': medians,
              'samples_per_s': {c: args.samples / m for c, m in medians.items()},
              'speedup_vs_single': {c: medians['single'] / m for c, m in medians.items()}}
    for config in configs:
        print(f'{config:>12}: median {medians[config]:.2f}s, '
              f'{args.samples / medians[config]:,.0f} samples/s, '
              f'speedup {result["speedup_vs_single"][config]:.2f}x')
    print(f'single writer: {share:.0%} of its CPU time is the main thread (the rest is shard '
          f'compression on its thread pool), so on 2 idle cores N processes can be at most '
          f'{2 * share:.2f}x faster')
    os.makedirs(os.path.dirname(args.json) or '.', exist_ok=True)
    with open(args.json, 'w') as f:
        json.dump(result, f, indent=2)


if __name__ == '__main__':
    main()
