"""Token-shard benchmarks: ranged download, swap wait, window throughput (ratios in one run).

    .venv/bin/python benchmarks/tokens_bench.py                       # all three, 1 GiB download
    .venv/bin/python -m benchmarks.tokens_bench --cases download --repeats 3
    .venv/bin/python benchmarks/tokens_bench.py --quick               # small sizes, 1 repeat

``download``: a ``--size`` shard through the link emulator (``--profile``); see
``benchmarks/tokens_link.py``.

``download-capped``: one ``--size`` file served by a loopback object server in its own process
(``benchmarks/tokens_server.py``) that caps each connection at ``--per-connection`` bytes/s
and all connections together at ``--aggregate`` bytes/s, as object stores do. Ours
(``streaming.storage.download_file``: parallel ranged GETs, ``--part-size`` x
``--concurrency``, by default s3transfer's own 8 MiB x 10) against boto3's ``download_file``
(s3transfer, its defaults), alternating, ``--repeats`` times, both warmed up first; the limit
is ``min(aggregate, per-connection x connections)``.

``swap``: a ``ShardRotation`` over three shards of ``--shard-size`` from the same server. With
the prefetch finished (a training window of ``--window-seconds``, longer than the download),
the time ``advance()`` blocks, against the window's length; with the prefetch unfinished
(swap soon after the start), the wait against the download time still remaining, and the log
line it produces.

``window``: ``--window-file`` bytes of uint32 tokens on local disk (page cache warm), read as
shuffled batches of ``--batch`` windows of ``--seq-len`` through ``TokenWindowDataset`` + a
``DataLoader`` (default collate), against numpy gathering the same batches from the same
memory map into a preallocated buffer (the memory-copy limit), and a plain sequential copy.

``verify``: the sidecar check. Its hash rate (``find_mismatch`` over a ``--shard-size``
shard, CPU seconds of the hashing thread) gives the CPU share of one core at any training speed;
then a ``ShardRotation`` over three such shards (a local "remote") trains at
``--train-tokens-per-s`` (batches gathered and paced) with ``verify`` on and off, and a restart
(``verify`` on over shards that a run now ended verified, so each is checked again), alternating:
the swap wait with the prefetch finished, and the verification's CPU seconds over the window.

``mix``: ``TokenMix`` over three local sources (weights 0.7/0.2/0.1, ``--batch`` windows of
``--seq-len`` a step, interleaved), against ``ShardRotation.batches`` over one of them: the
cost of drawing and gathering a mixed batch, per step.

Results: printed, and written to ``benchmarks/results/tokens[-quick].json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.tokens_common import HERE, MIB, median, point_s3_at, serve, stop, write_shards  # noqa: E402
from streaming.util import bytes_to_int  # noqa: E402


def random_file(path: str, size: int) -> None:
    with open(path, 'wb') as f:
        left = size
        while left:
            block = os.urandom(min(left, 64 * MIB))
            f.write(block)
            left -= len(block)


# ---- download ---------------------------------------------------------------------------------
def bench_download(args: argparse.Namespace, scratch: str) -> dict:
    import boto3
    from boto3.s3.transfer import TransferConfig

    from streaming.storage import download_file
    size = bytes_to_int(args.size)
    per, aggregate = bytes_to_int(args.per_connection), bytes_to_int(args.aggregate)
    root = os.path.join(scratch, 'served')
    os.makedirs(root)
    random_file(os.path.join(root, 'big.bin'), size)
    random_file(os.path.join(root, 'warm.bin'), 4 * MIB)
    proc, url = serve(root, per, aggregate)
    point_s3_at(url)
    os.environ['STREAMING_DOWNLOAD_PART_SIZE'] = str(bytes_to_int(args.part_size))
    os.environ['STREAMING_DOWNLOAD_CONCURRENCY'] = str(args.concurrency)
    client = boto3.client('s3', endpoint_url=url, aws_access_key_id='bench',
                          aws_secret_access_key='bench', region_name='us-east-1')
    out = os.path.join(scratch, 'out.bin')
    boto_config = TransferConfig()
    limit_ours = min(aggregate or float('inf'), per * args.concurrency if per else float('inf'))
    limit_boto = min(aggregate or float('inf'),
                     per * boto_config.max_request_concurrency if per else float('inf'))
    print(f'download: {size / MIB:.0f} MiB, each connection capped at {per / MIB:.0f} MiB/s, '
          f'all at {aggregate / MIB:.0f} MiB/s; ours {args.concurrency} x '
          f'{args.part_size} parts, boto3 {boto_config.max_request_concurrency} threads x '
          f'{boto_config.multipart_chunksize // MIB} MiB', flush=True)
    rates: dict[str, list[float]] = {'ours': [], 'boto3': []}
    try:
        # Warm both (imports, clients, connection pools) on a small object, untimed.
        download_file('s3://bench/warm.bin', out, timeout=60)
        client.download_file('bench', 'warm.bin', out, Config=boto_config)
        os.remove(out)
        for _ in range(args.repeats):
            for name in ('ours', 'boto3'):
                started = time.perf_counter()
                if name == 'ours':
                    download_file('s3://bench/big.bin', out, timeout=60, size=size)
                else:
                    client.download_file('bench', 'big.bin', out, Config=boto_config)
                seconds = time.perf_counter() - started
                assert os.path.getsize(out) == size
                os.remove(out)
                rates[name].append(size / seconds / MIB)
                print(f'  {name:<6} {seconds:7.2f} s  {rates[name][-1]:7.1f} MiB/s', flush=True)
    finally:
        stop(proc)
        shutil.rmtree(root, ignore_errors=True)
    ours, boto = median(rates['ours']), median(rates['boto3'])
    result = {'size_mib': size / MIB, 'per_connection_mib_s': per / MIB,
              'aggregate_mib_s': aggregate / MIB, 'limit_mib_s': limit_ours / MIB,
              'boto3_limit_mib_s': limit_boto / MIB, 'ours_mib_s': rates['ours'],
              'boto3_mib_s': rates['boto3'], 'ours_median': ours, 'boto3_median': boto,
              'ours_vs_limit': ours / (limit_ours / MIB), 'ours_vs_boto3': ours / boto}
    print(f'  median: ours {ours:.1f} MiB/s = {result["ours_vs_limit"]:.0%} of the '
          f'{limit_ours / MIB:.0f} MiB/s limit (target >= 80%); {result["ours_vs_boto3"]:.2f}x '
          f'boto3 (target >= 1)', flush=True)
    return result


# ---- swap -------------------------------------------------------------------------------------
class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def bench_swap(args: argparse.Namespace, scratch: str) -> dict:
    import numpy as np

    from streaming.tokens import ShardRotation, list_shards
    root = os.path.join(scratch, 'shards')
    write_shards(root, bytes_to_int(args.shard_size), args.seq_len)
    per, aggregate = bytes_to_int(args.per_connection), bytes_to_int(args.aggregate)
    proc, url = serve(root, per, aggregate)
    point_s3_at(url)
    os.environ['STREAMING_DOWNLOAD_PART_SIZE'] = str(bytes_to_int(args.part_size))
    os.environ['STREAMING_DOWNLOAD_CONCURRENCY'] = str(args.concurrency)
    captured = _Captured()
    logging.getLogger('streaming.tokens.rotation').addHandler(captured)
    logging.getLogger('streaming.tokens.rotation').setLevel(logging.INFO)
    finished, unfinished = [], []
    try:
        shards, _ = list_shards('s3://bench')
        size = shards[0].entry.bytes
        print(f'swap: shards of {size / MIB:.0f} MiB from the same server', flush=True)
        for _ in range(args.repeats):
            # Prefetch finished: a training window of --window-seconds reading batches, longer
            # than the download (else it is extended until the next shard is on disk).
            local = tempfile.mkdtemp(prefix='swap-', dir=scratch)
            with ShardRotation(shards, local, seq_len=args.seq_len, keep=2) as rotation:
                ds = rotation.dataset
                began = time.perf_counter()
                while time.perf_counter() - began < args.window_seconds or \
                        not rotation.store.ready(rotation.shards[1]):
                    ds.batch(np.arange(8) * 7 % len(ds)).sum()
                    time.sleep(0.01)
                window = time.perf_counter() - began
                started = time.perf_counter()
                rotation.advance()
                wait = time.perf_counter() - started
            finished.append({'window_s': window, 'wait_s': wait, 'ratio': wait / window})
            print(f'  prefetch finished:   window {window:6.2f} s, swap wait '
                  f'{wait * 1000:7.2f} ms ({wait / window:.3%} of the window)', flush=True)
            shutil.rmtree(local)
            # Prefetch unfinished: swap at once. Time a standalone download of a shard for the
            # remaining-time estimate first.
            local = tempfile.mkdtemp(prefix='swap-', dir=scratch)
            from streaming.storage import download_file
            started = time.perf_counter()
            for url, name, _ in shards[2].files():  # the token file and its sidecar
                download_file(url, os.path.join(local, name), timeout=60)
            alone = time.perf_counter() - started
            for _, name, _ in shards[2].files():
                os.remove(os.path.join(local, name))
            captured.lines.clear()
            with ShardRotation(shards, local, seq_len=args.seq_len, keep=2) as rotation:
                rotation.dataset  # noqa: B018 - shard 0 in the foreground; 1 starts now
                prefetch_started = time.perf_counter()
                time.sleep(alone / 3)
                started = time.perf_counter()
                rotation.advance()
                wait = time.perf_counter() - started
            remaining = alone - (started - prefetch_started)
            logged = [line for line in captured.lines if line.startswith('Waited')]
            unfinished.append({'wait_s': wait, 'remaining_s': remaining,
                               'ratio': wait / remaining, 'logged': logged})
            print(f'  prefetch unfinished: swap wait {wait:6.2f} s vs {remaining:6.2f} s of '
                  f'download remaining ({wait / remaining:.2f}x); logged: {logged}', flush=True)
            shutil.rmtree(local)
    finally:
        stop(proc)
        shutil.rmtree(root, ignore_errors=True)
    result = {'shard_mib': size / MIB, 'finished': finished, 'unfinished': unfinished,
              'finished_ratio_median': median([r['ratio'] for r in finished]),
              'finished_wait_ms_median': 1000 * median([r['wait_s'] for r in finished]),
              'unfinished_ratio_median': median([r['ratio'] for r in unfinished])}
    print(f'  median: finished {result["finished_wait_ms_median"]:.2f} ms = '
          f'{result["finished_ratio_median"]:.3%} of a window (target < 1%); unfinished wait / '
          f'remaining download {result["unfinished_ratio_median"]:.2f} (expected ~1)', flush=True)
    return result


# ---- window throughput ----------------------------------------------------------------------
def bench_window(args: argparse.Namespace, scratch: str) -> dict:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader

    from streaming.tokens import EpochSampler, ShardRotation, TokenWindowDataset, list_shards
    from streaming.tokens.format import ids_name, npy_header, window_ids
    seq, batch = args.seq_len, args.batch
    count = bytes_to_int(args.window_file) // 4 // seq * seq
    remote = os.path.join(scratch, 'window-remote')
    os.makedirs(remote)
    path = os.path.join(remote, 'train_000000.npy')
    rng = np.random.default_rng(1)
    with open(path, 'wb') as f:
        f.write(npy_header('uint32', count))
        for start in range(0, count, 4 * MIB):
            f.write(rng.integers(0, 200_000, min(4 * MIB, count - start), np.uint32).tobytes())
    ids = os.path.join(remote, ids_name(0))
    window_ids(np.load(path, mmap_mode='r'), seq).tofile(ids)
    dataset = TokenWindowDataset(path, seq_len=seq)
    shards, _ = list_shards(remote)
    rotation = ShardRotation(shards, os.path.join(scratch, 'window-local'), seq_len=seq,
                             verify=False)
    rotation.dataset  # noqa: B018 - copied in, outside the timing
    windows = len(dataset)
    total = windows // batch * batch * seq * 4
    order = EpochSampler(windows, seed=0).indices()[:windows // batch * batch]
    tokens2d = np.load(path, mmap_mode='r').reshape(-1, seq)
    out = np.empty((batch, seq), np.uint32)
    np.copyto(np.empty_like(tokens2d), tokens2d)  # Warm the page cache.
    print(f'window: {count * 4 / MIB:.0f} MiB of uint32, {windows} windows of {seq}, shuffled '
          f'batches of {batch}', flush=True)

    def raw_gather() -> None:
        for i in range(0, len(order), batch):
            np.take(tokens2d, order[i:i + batch], axis=0, out=out)

    def raw_sequential() -> None:
        for i in range(0, len(order), batch):
            np.copyto(out, tokens2d[i:i + batch])

    def take_fresh() -> None:  # numpy gathering into a new array each time
        for i in range(0, len(order), batch):
            np.take(tokens2d, order[i:i + batch], axis=0)

    def ours_batches() -> None:  # ShardRotation.batches: the same gathers, no DataLoader
        for tensor in rotation.batches(batch, seed=0, drop_last=True):
            assert tensor.dtype == torch.uint32 and tensor.shape == (batch, seq)

    def ours_verify_first_use() -> None:  # an unverified shard: every window hashed on use
        checked = TokenWindowDataset(path, ids, seq_len=seq, verify=True)
        for i in range(0, len(order), batch):
            checked.batch(order[i:i + batch])

    def ours() -> None:  # ShardRotation.loader: a DataLoader, one gather per batch.
        for tensor in rotation.loader(batch, seed=0, drop_last=True):
            assert tensor.dtype == torch.uint32 and tensor.shape == (batch, seq)

    def ours_collate() -> None:  # A DataLoader with the default collate: one window at a time.
        sampler = EpochSampler(windows, seed=0)
        for tensor in DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True):
            assert tensor.dtype == torch.uint32 and tensor.shape == (batch, seq)

    cases = (('raw_gather', raw_gather), ('ours_batches', ours_batches), ('ours', ours),
             ('take_fresh', take_fresh), ('ours_default_collate', ours_collate),
             ('ours_verify_first_use', ours_verify_first_use),
             ('raw_sequential', raw_sequential))
    rates: dict[str, list[float]] = {name: [] for name, _ in cases}
    for repeat in range(args.repeats):  # The order rotates, so no case always follows another.
        shift = repeat % len(cases)
        for name, fn in cases[shift:] + cases[:shift]:
            started = time.perf_counter()
            fn()
            rates[name].append(total / (time.perf_counter() - started) / MIB)
            print(f'  {name:<21} {rates[name][-1]:9.0f} MiB/s', flush=True)
    rotation.close()
    shutil.rmtree(remote)
    result = {name: median(values) for name, values in rates.items()}
    limit = max(result['raw_gather'], result['take_fresh'])
    result.update(runs=rates, file_mib=count * 4 / MIB, seq_len=seq, batch=batch,
                  ours_vs_gather=result['ours'] / result['raw_gather'],
                  gather_limit=limit, batches_vs_limit=result['ours_batches'] / limit,
                  loader_vs_limit=result['ours'] / limit,
                  verify_first_use_vs_limit=result['ours_verify_first_use'] / limit,
                  collate_vs_gather=result['ours_default_collate'] / result['raw_gather'],
                  ours_vs_sequential=result['ours'] / result['raw_sequential'])
    print(f'  median: ours {result["ours"]:.0f} MiB/s = {result["ours_vs_gather"]:.0%} of the '
          f'memory-copy limit for the same batches ({result["raw_gather"]:.0f} MiB/s; target '
          f'>= 50%), {result["ours_vs_sequential"]:.0%} of a sequential copy; with the default '
          f'collate {result["collate_vs_gather"]:.0%}', flush=True)
    print(f'  against the faster numpy gather ({limit:.0f} MiB/s): ShardRotation.batches '
          f'{result["batches_vs_limit"]:.0%} (target >= 80%), loader '
          f'{result["loader_vs_limit"]:.0%}; an unverified shard on first use '
          f'{result["verify_first_use_vs_limit"]:.0%}', flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--cases', nargs='+',
                        default=['download', 'swap', 'window', 'verify', 'mix'],
                        choices=['download', 'download-capped', 'swap', 'window', 'verify',
                                 'mix'])
    parser.add_argument('--profile', default='same-region',
                        help='download: the link emulator profile (benchmarks/linkemu.py)')
    parser.add_argument('--quick', action='store_true', help='small sizes, one repeat')
    parser.add_argument('--size', default='1gb')
    parser.add_argument('--per-connection', default='16mb')
    parser.add_argument('--aggregate', default='96mb')
    parser.add_argument('--part-size', default='8mb')
    parser.add_argument('--concurrency', type=int, default=10)
    parser.add_argument('--shard-size', default='128mb')
    parser.add_argument('--window-seconds', type=float, default=10.0,
                        help='swap: length of the simulated training window')
    parser.add_argument('--window-file', default='512mb')
    parser.add_argument('--seq-len', type=int, default=2048)
    parser.add_argument('--batch', type=int, default=32)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--train-tokens-per-s', type=float, default=4e6,
                        help='verify: the simulated training speed of the node')
    args = parser.parse_args()
    if args.quick:
        args.size, args.shard_size, args.window_file, args.repeats = '128mb', '32mb', '64mb', 1
        args.window_seconds = 3.0
    scratch = tempfile.mkdtemp(prefix='tokens-bench-')
    from benchmarks.tokens_checks import bench_mix, bench_verify
    from benchmarks.tokens_link import bench_link_download
    results: dict = {'args': vars(args), 'cores': os.cpu_count(),
                     'load_average': os.getloadavg(), 'date': time.strftime('%Y-%m-%d %H:%M')}
    try:
        for case in args.cases:
            results[case] = {'download': bench_link_download,
                             'download-capped': bench_download, 'swap': bench_swap,
                             'window': bench_window, 'verify': bench_verify,
                             'mix': bench_mix}[case](args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    name = 'tokens-quick.json' if args.quick else \
        'tokens.json' if len(args.cases) == 5 else f'tokens-{"-".join(args.cases)}.json'
    path = os.path.join(HERE, 'results', name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(results, f, indent=1)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
