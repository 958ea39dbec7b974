"""Where a cold epoch set-up goes, and the floor the reference's exact order puts under it.

On an index-only scale dataset (``python -m benchmarks.run`` generates them under
``benchmarks/.data/full/ours/scale-*``), each in a fresh process, ``--repeats`` times:

- ``init``: ``StreamingDataset(...)`` with no set-up caches (the index parsed and checked, its
  binary summary written);
- ``first sample``: from the start to the first sample (``init`` plus the epoch's order up to
  its first final window);
- ``fisher-yates``: only the part of the order that cannot be skipped or split: numpy's
  ``Generator.shuffle`` over every span of the epoch, one span after another, as the reference
  draws them (which sample comes first depends on the generator's state after the last span),
  in a view whose 8-byte items all share one place, as ``order.shuffles.py1e`` does it;
- ``first sample cpu``: the CPU time (all threads of the process) to the first sample, a
  measure that a busy machine inflates less than the wall clock;
- ``peak RSS``: the process's ``VmHWM`` after its first sample;
- ``shards per 4096``: distinct shards among each 4,096 consecutive samples worker 0 reads
  (median over the first 64 such runs): how many shards a worker has open at a time.

``--no-floor`` skips the Fisher-Yates floor (minutes at 1B on a busy machine).
``--litdata PATH`` also times LitData over its own copy of the dataset (``prepare.py litdata``),
a fresh process in its env (``envs.litdata_python``) after each of ours, in the same run:
``StreamingDataset(input_dir=PATH, shuffle=True)`` to its first item, timed after the imports;
each pair (ours, then LitData's) is compared too.
``--algo index`` times the index-computable shuffle instead of py1e (no Fisher-Yates floor: it
has none). ``--resume`` times a fresh process that loads a checkpoint at the middle of epoch 0
and takes the first batch from a ``StreamingDataLoader`` with ``--workers`` workers.

    .venv/bin/python benchmarks/cold_setup.py benchmarks/.data/full/ours/scale-100M
    .venv/bin/python benchmarks/cold_setup.py PATH --algo index
    .venv/bin/python benchmarks/cold_setup.py PATH --algo index --resume --workers 2
    .venv/bin/python benchmarks/cold_setup.py PATH --algo index --no-floor --litdata LITDATA_PATH
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def _locality(dataset: object) -> float:
    """Median distinct shards per 4,096 consecutive samples of worker 0's first 256k."""
    import numpy as np

    world = dataset.world.with_worker()  # type: ignore[attr-defined]
    order = dataset._worker_order(0, 0, world)  # type: ignore[attr-defined]
    ids = np.asarray(order[:1 << 18])
    shards = np.searchsorted(dataset.sample_offset_per_shard, ids[ids >= 0], 'right') - 1
    runs = shards[:len(shards) // 4096 * 4096].reshape(-1, 4096)
    return float(np.median([len(np.unique(run)) for run in runs]))


def _fisher_yates(dataset: object) -> float:
    import numpy as np

    sizes = np.asarray(dataset.samples_per_shard, np.int64)  # type: ignore[attr-defined]
    from numpy.lib.stride_tricks import as_strided

    # As py1e's draws-only pass (order.shuffles.py1e): 8-byte items (numpy's fastest
    # shuffle), all one item.
    buffer = as_strided(np.zeros(1, np.int64), shape=(int(sizes.max()),), strides=(0,))
    rng = np.random.default_rng(dataset.shuffle_seed)  # type: ignore[attr-defined]
    begin = time.perf_counter()
    for size in sizes.tolist():
        rng.shuffle(buffer[:size])
    return time.perf_counter() - begin


def child(path: str, algo: str, resume: bool, workers: int, floor: bool) -> dict[str, float]:
    from harness import peak_rss_mb

    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.dataset.cache_dirs import setup_cache_dir

    shutil.rmtree(setup_cache_dir(path), ignore_errors=True)
    start, cpu = time.perf_counter(), time.process_time()
    dataset = StreamingDataset(local=path, batch_size=256, shuffle=True, shuffle_algo=algo)
    built = time.perf_counter()
    if resume:
        loader = StreamingDataLoader(dataset, batch_size=256, num_workers=workers)
        loader.load_state_dict({'epoch': 0, 'sample_in_epoch': dataset.epoch_size // 2,
                                'num_canonical_nodes': 1, 'shuffle_seed': dataset.shuffle_seed,
                                'initial_physical_nodes': 1})
        next(iter(loader))
    else:
        next(iter(dataset))
    first = time.perf_counter()
    result = {'init_s': built - start, 'first_sample_s': first - start,
              'first_sample_cpu_s': time.process_time() - cpu,
              'peak_rss_mb': peak_rss_mb(children=resume), 'samples': dataset.epoch_size,
              'shards': dataset.num_shards}
    if not resume:
        result['shards_per_4096'] = _locality(dataset)
        if algo != 'index' and floor:
            result['fisher_yates_s'] = _fisher_yates(dataset)
    return result


def litdata_child(path: str) -> dict[str, float]:
    """LitData's cold first item over its copy of the dataset, timed as ``child`` times ours."""
    from harness import import_impl, peak_rss_mb

    litdata = import_impl('litdata')
    import torch  # noqa: F401  (imported by ours before the clock starts too)

    start, cpu = time.perf_counter(), time.process_time()
    dataset = litdata.StreamingDataset(input_dir=path, shuffle=True)
    built = time.perf_counter()
    next(iter(dataset))
    first = time.perf_counter()
    return {'init_s': built - start, 'first_sample_s': first - start,
            'first_sample_cpu_s': time.process_time() - cpu, 'peak_rss_mb': peak_rss_mb(),
            'samples': len(dataset), 'shards': 0}


def _report(title: str, runs: list[dict[str, float]]) -> None:
    print(title)
    for key in ('init_s', 'first_sample_s', 'first_sample_cpu_s', 'peak_rss_mb',
                'shards_per_4096', 'fisher_yates_s'):
        values = [run[key] for run in runs if key in run]
        if values:
            print(f'  {key:16} {statistics.median(values):8.2f}  '
                  f'({min(values):.2f}-{max(values):.2f})')


def _run(command: list[str]) -> dict[str, float]:
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == '--litdata-child':
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases'))
        print(json.dumps(litdata_child(sys.argv[2])))
        return
    if len(sys.argv) > 2 and sys.argv[1] == '--child':
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cases'))
        path, algo, resume, workers, floor = sys.argv[2:]
        print(json.dumps(child(path, algo, resume == '1', int(workers), floor == '1')))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('path', help='an index-only scale dataset written by ours')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--algo', default='py1e')
    parser.add_argument('--resume', action='store_true',
                        help='time the first batch after resuming at half of epoch 0')
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--no-floor', action='store_true', help='skip the Fisher-Yates floor')
    parser.add_argument('--litdata', metavar='PATH',
                        help="also time LitData over its copy of the dataset (prepare.py's)")
    args = parser.parse_args()
    litdata_python = None
    if args.litdata:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from benchmarks.envs import litdata_python as find_litdata
        litdata_python = find_litdata()
    runs, theirs = [], []
    for _ in range(args.repeats):
        runs.append(_run([sys.executable, __file__, '--child', args.path, args.algo,
                          '1' if args.resume else '0', str(args.workers),
                          '0' if args.no_floor else '1']))
        if litdata_python:
            theirs.append(_run([litdata_python, __file__, '--litdata-child', args.litdata]))
    what = f'resumed at 50% with {args.workers} workers' if args.resume else 'cold'
    _report(f"{args.algo}, {what}: {runs[0]['samples']:,} samples in {runs[0]['shards']:,} "
            f'shards, medians of {args.repeats} fresh processes:', runs)
    if theirs:
        _report(f"LitData, cold: {theirs[0]['samples']:,} samples, medians of {args.repeats} "
                f'fresh processes:', theirs)
        for key in ('first_sample_s', 'first_sample_cpu_s'):
            gaps = [ours[key] - their[key] for ours, their in zip(runs, theirs)]
            print(f'  pairs, {key}: ours below LitData in {sum(gap < 0 for gap in gaps)} of '
                  f"{len(gaps)} (ours - LitData: {', '.join(f'{gap:+.2f}' for gap in gaps)})")

if __name__ == '__main__':
    main()
