"""Epoch-order setup time, peak memory and shuffle quality: ours vs the reference.

Times ``streaming.order.get_epoch_order`` (shuffled, py1e, default block size) for 10M and 100M
samples over 50k shards, on 1 rank x 1 worker and 8 ranks x 4 workers, each in a fresh process
so that peak RSS (``VmHWM``) is its own. The reference (mosaicml-streaming 0.13.0,
run with its own interpreter) does the same work with ``get_partitions`` + ``get_shuffle`` and the
id lookup its dataset performs. ``--quality`` compares the shuffles' mixing instead.

    python benchmarks/order_setup.py                      # setup time and memory
    python benchmarks/order_setup.py --sizes 10M          # a quicker run
    python benchmarks/order_setup.py --quality            # shuffle quality table
    python benchmarks/order_setup.py --reference none     # ours only
    python benchmarks/order_setup.py --algo py1s --canonical-nodes 64 --sizes 100M
    python benchmarks/order_setup.py --batching-method stratified --canonical-nodes 2 \
        --sizes 10M --reference none                    # two streams (60% / 40% of the shards)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, 'cases'))
from harness import peak_rss_mb  # noqa: E402  (stdlib only; shared with the case scripts)

REFERENCE_PYTHONS = ('~/.cache/shardflow/reference-0.13.0/bin/python',
                     '~/.cache/oracle-probe/bin/python')
SEED, EPOCH, BATCH = 9176, 0, 32
QUALITY_ALGOS = ('py1e', 'index', 'py1br', 'py1b', 'py1s', 'py2s', 'naive')


def _shard_sizes(samples: int, shards: int) -> np.ndarray:
    sizes = np.full(shards, samples // shards, np.int64)
    sizes[:samples - int(sizes.sum())] += 1
    return sizes


def _import_reference() -> None:
    sys.path.insert(0, os.path.join(ROOT, 'tests', 'oracle'))
    import ref_driver  # noqa: F401  (installs the torchvision stand-in, imports the reference)


def _reference_order(sizes: np.ndarray, algo: str, canonical: int, ranks: int, workers: int,
                     batch: int, block: int, epoch: int) -> np.ndarray:
    """What the reference's random batching computes for one stream drawn once: partition,
    shuffle, then positions -> shuffled positions -> sample ids (``arange`` when every sample is
    drawn once, as ``resample_streams`` gives)."""
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle
    parts = get_partitions('orig', int(sizes.sum()), canonical, 1, ranks, workers, batch)
    shuffle = get_shuffle(algo, sizes, canonical, SEED, epoch, block)
    parts = np.where(parts == -1, -1, shuffle[parts])
    sample_ids = np.arange(int(sizes.sum()), dtype=np.int64)
    return np.where(parts == -1, -1, sample_ids[parts])


def _our_order(sizes: np.ndarray, algo: str, canonical: int, ranks: int, workers: int,
               batch: int, block: int, epoch: int, passes: float = 1.0,
               batching: str = 'random') -> np.ndarray:
    """Our order; with a batching method other than ``random``, over two streams (the first
    60% of the shards, then the rest)."""
    from streaming.order import get_epoch_order
    streams = np.zeros(len(sizes), np.int64)
    if batching != 'random':
        streams[int(0.6 * len(sizes)):] = 1
    choose = (np.bincount(streams, sizes) * passes).astype(np.int64)
    return get_epoch_order(shard_sizes=sizes, shard_streams=streams, stream_choose=choose,
                           epoch=epoch, seed=SEED,
                           shuffle=True, shuffle_algo=algo, shuffle_block_size=block,
                           num_canonical_nodes=canonical, ranks_per_node=ranks,
                           workers_per_rank=workers, batch_size=batch, batching_method=batching)


def child(which: str, samples: int, shards: int, ranks: int, workers: int, algo: str,
          canonical: int, passes: float, batching: str) -> None:
    """Time one epoch order in this process and print a JSON line."""
    if which == 'reference':
        _import_reference()
    else:
        import streaming.order  # noqa: F401  (so that the baseline includes the import)
    sizes = _shard_sizes(samples, shards)
    baseline = peak_rss_mb()
    start = time.perf_counter()
    block = max(4_000_000 // canonical, 1 << 18)
    if which == 'reference':
        order = _reference_order(sizes, algo, canonical, ranks, workers, BATCH, block, EPOCH)
    else:
        order = _our_order(sizes, algo, canonical, ranks, workers, BATCH, block, EPOCH, passes,
                           batching)
    seconds = time.perf_counter() - start
    print(json.dumps({'seconds': seconds, 'peak_mb': peak_rss_mb(), 'baseline_mb': baseline,
                      'output_mb': order.nbytes / 2**20}))


def _reference_python(choice: str) -> str | None:
    if choice == 'none':
        return None
    for path in ([choice] if choice != 'auto' else REFERENCE_PYTHONS):
        path = os.path.expanduser(path)
        if os.path.exists(path):
            return path
    return None


def _run_child(python: str, which: str, samples: int, shards: int, ranks: int,
               workers: int, algo: str, canonical: int, passes: float, batching: str) -> dict:
    command = [python, os.path.abspath(__file__), '--child', which, str(samples), str(shards),
               str(ranks), str(workers), algo, str(canonical), str(passes), batching]
    env = dict(os.environ)
    if which == 'reference':  # never let our tree's package shadow the reference's
        env.pop('PYTHONPATH', None)
        env.pop('PYTHONHOME', None)
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def setup_table(sizes: list[int], shards: int, reference: str | None, algo: str,
                canonical: int, passes: float, batching: str) -> None:
    print(f'{algo}, {batching} batching, {canonical} canonical node(s), {passes} passes over '
          'the data\n')
    if passes != 1.0 or batching != 'random':
        reference = None  # the reference harness here draws one stream once, random batching
    print('| samples | ranks x workers | impl | seconds | peak RSS MB | RSS before MB | '
          'output MB |\n|---|---|---|---|---|---|---|')
    for samples in sizes:
        for ranks, workers in ((1, 1), (8, 4)):
            runs = [('ours', sys.executable)] + ([('reference', reference)] if reference else [])
            for which, python in runs:
                got = _run_child(python, which, samples, shards, ranks, workers, algo, canonical,
                                 passes, batching)
                print(f"| {samples:,} | {ranks} x {workers} | {which} | {got['seconds']:.2f} | "
                      f"{got['peak_mb']:.0f} | {got['baseline_mb']:.0f} | "
                      f"{got['output_mb']:.0f} |", flush=True)


def mixing(order: np.ndarray, next_epoch: np.ndarray, sizes: np.ndarray) -> dict:
    """Quality of a flat epoch order, each measure relative to a uniform random permutation."""
    ids = order[order >= 0]
    count, shards = len(ids), len(sizes)
    shard = np.searchsorted(np.cumsum(sizes), ids, 'right')
    window = 256
    windows = shard[:count // window * window].reshape(-1, window)
    distinct = np.mean([len(np.unique(row)) for row in windows[::max(1, len(windows) // 400)]])
    uniform_distinct = shards * (1 - (1 - 1 / shards) ** window)
    jumps = np.abs(np.diff(ids.astype(np.int64))).mean() / (count / 3)
    later = next_epoch[next_epoch >= 0]
    position = np.empty(count, np.int64)
    position[ids] = np.arange(count)
    correlation = abs(np.corrcoef(position[later], np.arange(count))[0, 1])
    return {'shards per 256': distinct / uniform_distinct, 'neighbour gap': jumps,
            'epoch-to-epoch |r|': correlation}


def quality_child(which: str, algo: str, canonical: int) -> None:
    if which == 'reference':
        _import_reference()
    make = _reference_order if which == 'reference' else _our_order
    sizes = _shard_sizes(1_000_000, 500)
    orders = [make(sizes, algo, canonical, 1, 1, 1, 1 << 16, epoch).ravel() for epoch in (0, 1)]
    print(json.dumps(mixing(*orders, sizes)))


def quality_table(reference: str | None) -> None:
    print('1M samples in 500 shards of 2000, block size 65536; ratios to a uniform shuffle '
          '(1.0 is perfect mixing; |r| is 0 for unrelated epochs)\n')
    print('| algo | canonical nodes | impl | shards per 256 | neighbour gap | '
          'epoch-to-epoch abs(r) |\n|---|---|---|---|---|---|')
    for canonical in (1, 8):
        for algo in QUALITY_ALGOS:
            runs = [('ours', sys.executable)] + ([('reference', reference)] if reference else [])
            for which, python in runs:
                if which == 'reference' and algo in ('py1b', 'index'):
                    why = 'removed in 0.11' if algo == 'py1b' else 'ours only'
                    print(f'| {algo} | {canonical} | reference | {why} | | |')
                    continue
                command = [python, os.path.abspath(__file__), '--quality-child', which, algo,
                           str(canonical)]
                done = subprocess.run(command, capture_output=True, text=True, check=True,
                                      cwd=ROOT)
                got = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"| {algo} | {canonical} | {which} | {got['shards per 256']:.3f} | "
                      f"{got['neighbour gap']:.3f} | {got['epoch-to-epoch |r|']:.3f} |",
                      flush=True)


def _count(text: str) -> int:
    scale = {'k': 10**3, 'M': 10**6, 'G': 10**9}
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == '--child':
        which, samples, shards, ranks, workers, algo, canonical, passes, batching = sys.argv[2:]
        return child(which, int(samples), int(shards), int(ranks), int(workers), algo,
                     int(canonical), float(passes), batching)
    if len(sys.argv) > 1 and sys.argv[1] == '--quality-child':
        return quality_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', nargs='+', default=['10M', '100M'])
    parser.add_argument('--shards', type=int, default=50_000)
    parser.add_argument('--reference', default='auto',
                        help="the reference's python, 'auto' to look in the usual places, "
                             "or 'none'")
    parser.add_argument('--algo', default='py1e', help='shuffle algorithm to time')
    parser.add_argument('--canonical-nodes', type=int, default=1)
    parser.add_argument('--passes', type=float, default=1.0,
                        help='samples drawn per epoch / dataset size (ours only when not 1)')
    parser.add_argument('--batching-method', default='random',
                        help='batching method to time (ours only when not random)')
    parser.add_argument('--quality', action='store_true', help='shuffle quality, not timing')
    args = parser.parse_args()
    reference = _reference_python(args.reference)
    if args.quality:
        quality_table(reference)
    else:
        setup_table([_count(size) for size in args.sizes], args.shards, reference, args.algo,
                    args.canonical_nodes, args.passes, args.batching_method)


if __name__ == '__main__':
    main()
