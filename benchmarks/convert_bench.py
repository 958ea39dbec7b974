"""Parallel conversion: ``write_parallel`` with N processes vs one writing process, zstd data.

    .venv/bin/python benchmarks/convert_bench.py --workload jsonl --samples 300000 --repeats 3
    .venv/bin/python benchmarks/convert_bench.py --samples 100000 --workers 2 4 --repeats 5

Every measurement runs in a fresh process, alternating between the configurations, and the
medians are compared. The time runs from just before the first sample is read to the index
being written (imports are done before; worker start-up and the merge are inside). Configurations:

- ``single``: one process, our ``MDSWriter``, which compresses and hashes finished shards on a
  thread pool, so it already uses a second core for part of the work;
- ``single-1core``: the same, pinned to one CPU (``sched_setaffinity``): one process on one
  core, as the reference's ``MDSWriter`` runs (it compresses on its main thread);
- ``reference``: mosaicml-streaming 0.13.0's own ``MDSWriter`` in one process, same data and
  options (its python from ``STREAMING_REFERENCE_PYTHON``, default
  ``~/.cache/shardflow/reference-0.13.0/bin/python``; left out if missing);
- ``parallel-N``: ``write_parallel`` with N parts (the calling process writes part 0, N - 1
  worker processes the others), then ``merge_index``.

Workloads: ``synthetic`` (text from a fixed vocabulary plus 256 random int32 tokens, made inside
the writing process) and ``jsonl`` (a jsonl corpus of web-document-like records, read as
``streaming convert`` reads it; the reference reads it with ``json.loads`` per line).

With a share ``s`` of the single writer's CPU time on its main thread, N processes on 2 cores
can be at most ``2 * s`` times faster than ``single``, and at most 2x ``single-1core``; the
script measures ``s``. A speedup needs idle cores: each run's 1-minute load average is printed
next to its time.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REFERENCE_CHILD = sys.argv[1:3] == ['--child', 'reference']
if not _REFERENCE_CHILD:  # The reference's child must import its own ``streaming``.
    sys.path.insert(0, ROOT)

COLUMNS = {'id': 'int', 'text': 'str', 'tokens': 'ndarray:int32'}
JSONL_COLUMNS = {'id': 'int', 'score': 'float64', 'text': 'str', 'url': 'str'}
OPTIONS = {'compression': 'zstd', 'hashes': ['xxh64'], 'size_limit': 1 << 24}
REFERENCE_PYTHON = os.environ.get('STREAMING_REFERENCE_PYTHON') or os.path.expanduser(
    '~/.cache/shardflow/reference-0.13.0/bin/python')


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


def jsonl_lines(path: str):
    """Every record of a jsonl file, parsed line by line (how the reference's user reads it)."""
    with open(path, 'rb') as f:
        for line in f:
            yield json.loads(line)


def _cpu(who: str = 'both') -> float:
    """CPU seconds of this process (``self``), its waited-for children, or ``both``."""
    import resource
    kinds = {'self': [resource.RUSAGE_SELF], 'children': [resource.RUSAGE_CHILDREN]}.get(
        who, [resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN])
    return sum(resource.getrusage(k).ru_utime + resource.getrusage(k).ru_stime for k in kinds)


def _started(sent: float, box: object) -> None:
    """A worker process's body: report when it got here after importing the writer."""
    import streaming.convert.parallel  # noqa: F401 - what a write_parallel worker imports
    box.put(time.time() - sent)  # type: ignore[attr-defined]


def phases(out: str, parts: int) -> dict[str, float]:
    """Where a parallel run's fixed costs go: a worker's start, and the merge of the indexes."""
    import multiprocessing

    from streaming.merge import merge_index
    ctx = multiprocessing.get_context('spawn')
    box = ctx.Queue()
    proc = ctx.Process(target=_started, args=(time.time(), box))
    proc.start()
    start_s = box.get()
    proc.join()
    begin = time.perf_counter()
    merge_index([os.path.join(out, f'part-{k:05}', 'index.json') for k in range(parts)], out)
    return {'worker_start_s': start_s, 'merge_s': time.perf_counter() - begin}


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


def measure(config: str, total: int, out: str, workload: str) -> dict[str, float]:
    """Wall, CPU and main-thread CPU seconds to write ``total`` samples with ``config``.

    For ``parallel-N`` also the CPU seconds of the calling process (which writes part 0) and of
    the workers, and the fixed costs measured after the run (``phases``).
    """
    if config == 'single-1core':
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if config == 'reference':  # Its ``import streaming`` imports torchvision, broken here.
        sys.path.insert(0, os.path.join(ROOT, 'benchmarks', 'cases'))
        from harness import install_torchvision_stand_in
        install_torchvision_stand_in()
    from streaming import MDSWriter
    if config == 'reference':
        source = partial(jsonl_lines, jsonl_corpus(total)) if workload == 'jsonl' else \
            partial(samples, 0, 1, total)
        columns = JSONL_COLUMNS if workload == 'jsonl' else COLUMNS
    elif workload == 'jsonl':
        from streaming.convert.inputs import infer_columns, open_source
        parts = int(config.split('-')[1]) if config.startswith('parallel') else 1
        jsonl = open_source(jsonl_corpus(total), 'jsonl', parts=parts)
        columns = infer_columns(jsonl)
        assert columns == JSONL_COLUMNS, columns
        source = jsonl if config.startswith('parallel') else partial(jsonl, 0, 1)
    else:
        columns = COLUMNS
        source = partial(samples, total=total) if config.startswith('parallel') else \
            partial(samples, 0, 1, total)
    if config.startswith('parallel'):
        from streaming.convert import write_parallel
    mine, theirs, main = _cpu('self'), _cpu('children'), time.thread_time()
    start = time.perf_counter()
    if config.startswith('parallel'):
        write_parallel(source, out, columns=columns, workers=int(config.split('-')[1]),
                       progress_bar=False, **OPTIONS)
    else:
        with MDSWriter(out=out, columns=columns, **OPTIONS) as writer:
            for sample in source():
                writer.write(sample)
    result = {'wall': time.perf_counter() - start, 'main_cpu': time.thread_time() - main,
              'self_cpu': _cpu('self') - mine, 'children_cpu': _cpu('children') - theirs}
    result['cpu'] = result['self_cpu'] + result['children_cpu']
    if config.startswith('parallel'):
        result.update(phases(out, int(config.split('-')[1])))
    return result


def _child(config: str, total: int, workload: str) -> dict[str, float]:
    out = tempfile.mkdtemp(prefix='convert-bench-')
    python, env = sys.executable, None
    if config == 'reference':  # Its own streaming, never ours through PYTHONPATH.
        python = REFERENCE_PYTHON
        env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    try:
        proc = subprocess.run([python, os.path.abspath(__file__), '--child', config, '--samples',
                               str(total), '--out', os.path.join(out, 'ds'), '--workload',
                               workload], capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f'{config} failed:\n{proc.stderr[-3000:]}')
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _report(args: argparse.Namespace, configs: list[str], times: dict[str, list[float]],
            cpu: dict[str, list[float]], main_share: list[float], load: list[float]) -> dict:
    medians = {c: statistics.median(t) for c, t in times.items()}
    share = statistics.median(main_share)
    baselines = [c for c in ('single', 'single-1core', 'reference') if c in configs]
    speedups = {base: {c: medians[base] / medians[c] for c in configs} for base in baselines}
    for config in configs:
        vs = ', '.join(f'{speedups[b][config]:.2f}x vs {b}' for b in baselines if b != config)
        print(f'{config:>12}: median {medians[config]:.2f}s, '
              f'{args.samples / medians[config]:,.0f} samples/s, '
              f'CPU {statistics.median(cpu[config]):.2f}s; {vs}')
    print(f'single writer: {share:.0%} of its CPU time is the main thread (the rest is shard '
          f'compression on its thread pool), so on 2 idle cores N processes can be at most '
          f'{2 * share:.2f}x faster than it, and at most 2x faster than single-1core')
    print(f'load average (1 min) during the runs: median {statistics.median(load):.1f}, '
          f'max {max(load):.1f}, on {os.cpu_count()} CPUs')
    return {'workload': args.workload, 'samples': args.samples, 'cpus': os.cpu_count(),
            'repeats': args.repeats, 'single_main_thread_cpu_share': share,
            'speedup_bound_vs_single_on_2_cores': 2 * share,
            'load_average_1min': load, 'cpu_seconds': cpu, 'seconds': times,
            'median_seconds': medians,
            'samples_per_s': {c: args.samples / m for c, m in medians.items()},
            'speedup': speedups}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=100_000)
    parser.add_argument('--workers', type=int, nargs='+', default=[2])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--workload', choices=('synthetic', 'jsonl'), default='synthetic',
                        help='synthetic: text + token arrays made in the writing process; '
                        'jsonl: a jsonl corpus converted as `streaming convert` does')
    parser.add_argument('--no-reference', action='store_true',
                        help="leave out the reference's MDSWriter")
    parser.add_argument('--json', default=os.path.join(ROOT, 'benchmarks/results/convert.json'))
    parser.add_argument('--child')
    parser.add_argument('--out')
    args = parser.parse_args()
    if args.child:
        if args.child == 'reference':
            print(json.dumps(measure(args.child, args.samples, args.out, args.workload)))
            return
        # Re-import through the package path so worker processes can unpickle ``samples``.
        from benchmarks import convert_bench
        print(json.dumps(convert_bench.measure(args.child, args.samples, args.out,
                                               args.workload)))
        return
    if args.workload == 'jsonl':
        jsonl_corpus(args.samples)  # Made before any timing.
    configs = ['single', 'single-1core'] + [f'parallel-{n}' for n in args.workers]
    if not args.no_reference and os.path.exists(REFERENCE_PYTHON):
        configs.insert(2, 'reference')
    elif not args.no_reference:
        print(f'reference python {REFERENCE_PYTHON} not found: the reference is left out')
    times: dict[str, list[float]] = {c: [] for c in configs}
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    main_share, load = [], []
    for repeat in range(args.repeats):
        for config in configs:
            run = _child(config, args.samples, args.workload)
            runs[config].append(run)
            times[config].append(run['wall'])
            cpu[config].append(run['cpu'])
            if config == 'single':
                main_share.append(run['main_cpu'] / run['cpu'])
            load.append(os.getloadavg()[0])
            extra = ''
            if config.startswith('parallel'):
                extra = (f' (calling process {run["self_cpu"]:.2f}s, workers '
                         f'{run["children_cpu"]:.2f}s; a worker starts in '
                         f'{run["worker_start_s"]:.2f}s, the merge takes {run["merge_s"]:.3f}s)')
            print(f'repeat {repeat + 1}: {config}: {run["wall"]:.2f}s wall, {run["cpu"]:.2f}s '
                  f'CPU{extra}, load {load[-1]:.1f}', flush=True)
    result = _report(args, configs, times, cpu, main_share, load)
    result['runs'] = runs
    os.makedirs(os.path.dirname(args.json) or '.', exist_ok=True)
    with open(args.json, 'w') as f:
        json.dump(result, f, indent=2)


if __name__ == '__main__':
    main()
