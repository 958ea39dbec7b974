"""CPU per call of ``get_partitions`` and of the epoch plan on small worlds: ours vs the reference.

Many small calls are what a test suite, a planner searching settings or a user sweeping
``num_canonical_nodes`` makes; there the fixed cost of a call matters, not its throughput
(``order_setup.py`` measures the billion-sample end). Each side runs in a fresh process of its
own interpreter (the reference, mosaicml-streaming 0.13.0, from its env), makes one warm-up
call per shape, then times the calls by ``time.process_time`` (this process's user + system CPU).

Shapes:

- ``partition walk``: ``get_partitions('orig', 1000, 176, 22, 8, 8, 10, drop_first)`` for
  ``drop_first`` in ``range(500)``: the reference suite's ``test_partition_walk``.
- ``partition one node``: 10,000 samples, 8 canonical nodes, 1 node x 8 ranks x 2 workers,
  batch 32, ``drop_first`` in ``range(0, 10000, 100)``.
- ``epoch plan walk`` / ``epoch plan one node``: the shuffled (``py1e``) epoch order of 1,000
  (10,000) samples in 10 (20) shards on the same worlds, resumed at 100 sample counts. Ours is
  ``streaming.order.get_epoch_order``; the reference's is what its ``random`` batching does:
  ``get_partitions`` + ``get_shuffle`` + the lookup of shuffled positions.

    python benchmarks/small_shapes.py                 # both sides, table + results JSON
    python benchmarks/small_shapes.py --reference none
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, 'results', 'small-shapes.json')
SEED, BLOCK = 1234, 1 << 18
# name: (num_samples, shards, canonical, physical, ranks, workers, batch, resume points)
SHAPES = {
    'partition walk': (1000, 0, 176, 22, 8, 8, 10, range(500)),
    'partition one node': (10_000, 0, 8, 1, 8, 2, 32, range(0, 10_000, 100)),
    'epoch plan walk': (1000, 10, 176, 22, 8, 8, 10, range(0, 500, 5)),
    'epoch plan one node': (10_000, 20, 8, 1, 8, 2, 32, range(0, 10_000, 100)),
}


def _sizes(samples: int, shards: int) -> np.ndarray:
    sizes = np.full(shards, samples // shards, np.int64)
    sizes[:samples - int(sizes.sum())] += 1
    return sizes


def _reference_call(shape: tuple, point: int) -> np.ndarray:
    from streaming.base.partition import get_partitions
    samples, shards, canonical, physical, ranks, workers, batch, _ = shape
    parts = get_partitions('orig', samples, canonical, physical, ranks, workers, batch, point)
    if not shards:
        return parts
    from streaming.base.shuffle import get_shuffle
    shuffle = get_shuffle('py1e', _sizes(samples, shards), canonical, SEED, 0, BLOCK)
    return np.where(parts == -1, -1, shuffle[parts])


def _our_call(shape: tuple, point: int) -> np.ndarray:
    samples, shards, canonical, physical, ranks, workers, batch, _ = shape
    if not shards:
        from streaming.base.partition import get_partitions
        return get_partitions('orig', samples, canonical, physical, ranks, workers, batch, point)
    from streaming.order import get_epoch_order
    sizes = _sizes(samples, shards)
    return get_epoch_order(shard_sizes=sizes, shard_streams=np.zeros(shards, np.int64),
                           stream_choose=np.array([samples]), epoch=0, seed=SEED, shuffle=True,
                           shuffle_algo='py1e', shuffle_block_size=BLOCK,
                           num_canonical_nodes=canonical, partition_algo='orig',
                           num_physical_nodes=physical, ranks_per_node=ranks,
                           workers_per_rank=workers, batch_size=batch, sample_in_epoch=point)


def child(which: str) -> None:
    """Time every shape in this process; print one JSON line of CPU seconds per call."""
    if which == 'reference':
        sys.path.insert(0, os.path.join(ROOT, 'tests', 'oracle'))
        import logging

        import ref_driver  # noqa: F401  (the torchvision stand-in, then the reference)
        logging.disable(logging.WARNING)  # It logs a line per call whose drop_first it rounds.
    warnings.simplefilter('ignore')
    call = _reference_call if which == 'reference' else _our_call
    out = {}
    for name, shape in SHAPES.items():
        start = time.process_time()
        call(shape, 0)
        first = time.process_time() - start
        points = shape[-1]
        start = time.process_time()
        for point in points:
            call(shape, point)
        out[name] = {'first_call_s': first,
                     'per_call_ms': (time.process_time() - start) / len(points) * 1e3,
                     'calls': len(points)}
    print(json.dumps(out))


def _run(python: str, which: str) -> dict:
    env = dict(os.environ)
    if which == 'reference':  # Our tree must not shadow the reference's package.
        env.pop('PYTHONPATH', None)
    done = subprocess.run([python, os.path.abspath(__file__), '--child', which], env=env,
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], name: str, key: str) -> float:
    return float(np.median([run[name][key] for run in runs]))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == '--child':
        return child(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--reference', default='~/.cache/shardflow/reference-0.13.0/bin/python',
                        help="the reference's python, or 'none'")
    parser.add_argument('--repeats', type=int, default=3, help='fresh processes per side')
    args = parser.parse_args()
    sides = {'ours': sys.executable}
    if args.reference != 'none':
        sides['reference'] = os.path.expanduser(args.reference)
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for _ in range(args.repeats):  # Alternating sides, so that load changes hit both.
        for side, python in sides.items():
            runs[side].append(_run(python, side))
    print(f'load average {os.getloadavg()[0]:.2f}; CPU ms per call, median of {args.repeats} '
          'processes\n')
    print('| shape | calls | ours ms/call | reference ms/call | ours/ref | ours first call s |'
          '\n|---|---|---|---|---|---|')
    table = {}
    for name in SHAPES:
        ours = _median(runs['ours'], name, 'per_call_ms')
        ref = _median(runs['reference'], name, 'per_call_ms') if 'reference' in runs else None
        ratio = ours / ref if ref else None
        table[name] = {'ours_ms': ours, 'reference_ms': ref, 'ratio': ratio,
                       'ours_first_call_s': _median(runs['ours'], name, 'first_call_s')}
        print(f"| {name} | {runs['ours'][0][name]['calls']} | {ours:.3f} | "
              f"{'n/a' if ref is None else f'{ref:.3f}'} | "
              f"{'n/a' if ratio is None else f'{ratio:.2f}x'} | "
              f"{table[name]['ours_first_call_s']:.3f} |")
    with open(RESULTS, 'w') as f:
        json.dump({'load_average': os.getloadavg(), 'shapes': table, 'runs': runs}, f, indent=1)


if __name__ == '__main__':
    main()
