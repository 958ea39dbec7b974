"""Soak: many epochs of a multi-node job; the resources each rank holds must stay flat.

Emulated nodes on one machine: ``--nodes`` x ``--ranks`` real processes in one gloo process
group, each node with its own local cache (so its own shared directory under ``/dev/shm``)
and its own temp directory, every rank with a ``StreamingDataLoader`` of ``--workers`` workers
(kept between epochs) reading a shuffled dataset through a ``cache_limit``. After each epoch,
with every rank at a barrier on either side, every rank records its RSS, open fds, threads, the
``/dev/shm`` files it maps, the entries of its node's shared directory, and the files in its
node's cache and temp directory. The run passes when every epoch delivers every sample exactly
once across the job and, after epoch ``--settle``, RSS grows by at most 5% and nothing else
grows (``check``: a count may move by one for an epoch, but its typical value over the last
epochs stays within what it was by ``--settle``). Idle pooled download threads are the
exception: the pools grow to the busiest moment so far, up to a fixed bound, checked apart.

    python benchmarks/soak.py                                  # 30 epochs, 2 nodes x 2 x 2
    python benchmarks/soak.py --epochs 8 --nodes 1             # the CI size (tests/dataset)
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
import uuid
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # Run as a script too.
from benchmarks.ranks import finish_ranks  # noqa: E402
from streaming.cache.concurrency import Concurrency  # noqa: E402

RSS_GROWTH = 1.05  # The largest RSS growth allowed after the settling epochs.
# Pooled download threads: the prefetch pool's (at most ``Concurrency.HIGH``), and a watchdog
# thread for each download running at once (the pool's, and one per reading thread).
POOLED_BOUND = 2 * Concurrency.HIGH + 2
FLAT = ('fds', 'threads', 'shm_maps', 'shared_entries', 'cache_files', 'temp_files')


def _count_files(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def _pooled_threads() -> int:
    """Download threads kept idle for reuse: the prefetch pool's and the watchdog's.

    Both pools grow on demand up to a bound (``POOLED_BOUND``), to whatever the busiest moment
    of any epoch so far needed, which may come after ``--settle``: a pool that grew is not a
    leak, so they are counted apart from the other threads, which must stay flat.
    """
    import threading

    from streaming.storage.watchdog import idle_threads
    executor = sum(thread.name.startswith('streaming-download_')  # ThreadPoolExecutor's names.
                   for thread in threading.enumerate())
    return executor + idle_threads()


def _snapshot(shared_dir: str, local: str, temp: str) -> dict[str, int]:
    """What this process holds now (the loader's workers have exited: the epoch is over)."""
    with open('/proc/self/status') as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith('VmRSS:'))
    with open('/proc/self/maps') as maps:
        shm = {line.split(maxsplit=5)[5].strip() for line in maps
               if len(line.split(maxsplit=5)) == 6 and '/dev/shm/' in line}
    pooled = _pooled_threads()
    return {'rss_kb': rss_kb, 'fds': len(os.listdir('/proc/self/fd')),
            'threads': len(os.listdir('/proc/self/task')) - pooled, 'pooled_threads': pooled,
            'shm_maps': len(shm), 'shared_entries': len(os.listdir(shared_dir)),
            'cache_files': _count_files(local), 'temp_files': _count_files(temp)}


def rank_main(config_path: str) -> None:
    """One rank: join the group, read ``epochs`` epochs, write the ids and snapshots."""
    import torch.distributed as dist

    from streaming import StreamingDataLoader, StreamingDataset
    with open(config_path) as file:
        job = json.load(file)
    rank = int(os.environ['RANK'])
    node = rank // int(os.environ['LOCAL_WORLD_SIZE'])
    dist.init_process_group('gloo', init_method=f'file://{job["rendezvous"]}', rank=rank,
                            world_size=int(os.environ['WORLD_SIZE']))
    local = os.path.join(job['root'], f'node{node}')
    dataset = StreamingDataset(remote=job['remote'], local=local, batch_size=job['batch_size'],
                               shuffle=True, cache_limit=job['cache_limit'])
    # A batch that takes minutes means something is stuck: fail with torch's message instead.
    loader = StreamingDataLoader(dataset, batch_size=job['batch_size'],
                                 num_workers=job['workers'],
                                 timeout=120 if job['workers'] else 0)
    epochs = []
    for _ in range(job['epochs']):
        ids = [int(i) for batch in loader for i in batch['id']]
        # A steady moment: every rank of the job at the end of the epoch, and none in the next
        # one yet (a rank that went on would already be computing the next epoch's order in
        # the node's shared directory, or downloading its first shards, while this one counts).
        dist.barrier()
        epochs.append({'ids': ids, **_snapshot(dataset._shared.path, local, os.environ['TMPDIR'])})
        dist.barrier()
    with open(os.path.join(job['root'], f'rank{rank}.json'), 'w') as file:
        json.dump(epochs, file)
    dist.barrier()
    dist.destroy_process_group()


def _write_dataset(remote: str, samples: int) -> None:
    import numpy as np

    from streaming import MDSWriter
    with MDSWriter(out=remote, columns={'id': 'int', 'payload': 'bytes'}, size_limit=1 << 13,
                   compression='zstd') as writer:
        for i in range(samples):
            writer.write({'id': i, 'payload': np.random.RandomState(i).bytes(256)})


def run(root: str, *, nodes: int, ranks: int, workers: int, epochs: int, samples: int = 1920,
        batch_size: int = 8, cache_limit: str = '160kb', timeout: float = 1800) -> dict[str, Any]:
    """Run the soak job under ``root``; returns per rank, per epoch, its snapshots and ids."""
    remote = os.path.join(root, 'remote')
    _write_dataset(remote, samples)
    world = nodes * ranks
    job = {'root': root, 'remote': remote, 'rendezvous': os.path.join(root, 'rendezvous'),
           'epochs': epochs, 'workers': workers, 'batch_size': batch_size,
           'cache_limit': cache_limit}
    config = os.path.join(root, 'soak.json')
    with open(config, 'w') as file:
        json.dump(job, file)
    port = str(20000 + uuid.uuid4().int % 20000)
    procs = []
    # Short temp paths: multiprocessing puts AF_UNIX sockets there (torch sends tensors between
    # workers through one), and a socket path over 107 bytes fails inside a worker's send.
    temps = [tempfile.mkdtemp(prefix=f'soak{node}-') for node in range(nodes)]
    for rank in range(world):
        temp = temps[rank // ranks]
        env = {**os.environ, 'RANK': str(rank), 'WORLD_SIZE': str(world),
               'LOCAL_RANK': str(rank % ranks), 'LOCAL_WORLD_SIZE': str(ranks),
               'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': port, 'TMPDIR': temp,
               'PYTHONPATH': os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')])}
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), '--rank-main',
                                       config], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    try:
        per_rank = finish_ranks(procs, root, timeout)
    finally:
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
    return {'samples': samples, 'ranks': per_rank}


def check(result: dict[str, Any], settle: int = 2) -> list[str]:
    """What went wrong (empty: passed): an inexact epoch, or a resource growing after ``settle``."""
    problems = []
    ranks = result['ranks']
    for epoch in range(len(ranks[0])):
        seen = sorted(i for rank in ranks for i in rank[epoch]['ids'])
        if seen != list(range(result['samples'])):
            problems.append(f'epoch {epoch}: {len(seen)} ids, {len(set(seen))} distinct, '
                            f'expected each of {result["samples"]} once')
    for rank, epochs in enumerate(ranks):
        rss = epochs[min(settle, len(epochs) - 1)]['rss_kb']
        problems += [f'rank {rank}: RSS {rss} kB after epoch {settle}, {later["rss_kb"]} kB '
                     f'after epoch {number}'
                     for number, later in enumerate(epochs[settle + 1:], settle + 1)
                     if later['rss_kb'] > RSS_GROWTH * rss]
        # Counts move a little from epoch to epoch (evictions, a download or thread of the next
        # epoch already going): growing means the later epochs' typical value (the median of
        # the last half) passes the largest seen up to ``settle``. A leak of even one entry
        # per epoch does.
        tail = epochs[settle + 1:][-max(1, (len(epochs) - settle - 1) // 2):]
        problems += [f'rank {rank}: {later["pooled_threads"]} pooled download threads after '
                     f'epoch {number}, more than the pools can hold ({POOLED_BOUND})'
                     for number, later in enumerate(epochs)
                     if later['pooled_threads'] > POOLED_BOUND]
        for name in FLAT:
            bound = max(epoch[name] for epoch in epochs[:settle + 1])
            typical = statistics.median_low(epoch[name] for epoch in tail) if tail else bound
            # The cache under its limit holds whole shards: whether the next epoch's first
            # download or the eviction that makes room for it comes first moves it by one.
            if typical > bound + (name == 'cache_files'):
                problems.append(f'rank {rank}: {name} up to {bound} by epoch {settle}, '
                                f'{typical} over the last {len(tail)} epochs')
    return sorted(set(problems))


def table(result: dict[str, Any]) -> str:
    """Per epoch: the largest value over ranks of each measure."""
    names = ('rss_kb',) + FLAT + ('pooled_threads',)
    lines = ['| epoch | ' + ' | '.join(names) + ' |', '|---' * (len(names) + 1) + '|']
    for epoch in range(len(result['ranks'][0])):
        row = [max(rank[epoch][name] for rank in result['ranks']) for name in names]
        lines.append(f'| {epoch} | ' + ' | '.join(str(v) for v in row) + ' |')
    return '\n'.join(lines)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == '--rank-main':
        rank_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=2)
    parser.add_argument('--ranks', type=int, default=2)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=30)
    parser.add_argument('--samples', type=int, default=1920)
    parser.add_argument('--cache-limit', default='160kb')
    parser.add_argument('--settle', type=int, default=2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix='soak-')
    try:
        result = run(root, nodes=args.nodes, ranks=args.ranks, workers=args.workers,
                     epochs=args.epochs, samples=args.samples, cache_limit=args.cache_limit)
        print(table(result))
        problems = check(result, args.settle)
        print('\n'.join(problems) if problems else
              f'passed: {args.epochs} epochs exact, flat after epoch {args.settle}')
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if problems else 0)


if __name__ == '__main__':
    main()
