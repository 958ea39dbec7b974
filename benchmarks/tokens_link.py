"""The ``download`` case of ``benchmarks/tokens_bench.py``: a 1 GiB shard through the link emulator.

Run it through ``tokens_bench.py --cases download``. A ``--size`` ``.npy`` of uint32 tokens
(random, written once and cached under ``benchmarks/.data``) is served by the loopback object
server (``tokens_server.py``, no caps of its own) behind ``benchmarks/linkemu.py`` with the
``--profile`` link (same-region: 40 ms to first byte, 12 MB/s per connection, 96 MB/s link).
Ours (``streaming.storage.download_file`` with the shard's size known, as
``ShardStore.fetch`` calls it, with ``ShardStore``'s ``download_config()``; also the storage
layer's default ``DownloadConfig`` as ``ours_layer_default`` when it differs) against boto3's
``download_file`` with its ``TransferConfig`` defaults, the order rotating, ``--repeats`` times
after one untimed warm-up each; medians, the share of the link, the client's CPU seconds and
the emulator's counters (requests by kind, transfers in flight). The emulator's own
``--self-check`` runs first in the same process, so the figures come with what the link
delivered to a plain client at the time.

moto is not the upstream here: moto 5 answers a ranged GET by reading the whole object into
memory and slicing it (a 1 KiB range of a 256 MiB object takes 0.7-0.9 s on this machine), so
a 1 GiB object in 8-16 MiB parts would measure moto, not the link.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

from benchmarks.tokens_common import HERE, MIB, point_s3_at, serve, stop
from streaming.util import bytes_to_int

__all__ = ['bench_link_download', 'cached_npy']


def cached_npy(size: int) -> str:
    """A ``.npy`` of uint32 tokens of about ``size`` bytes under ``benchmarks/.data`` (cached)."""
    import numpy as np

    from streaming.tokens.format import npy_header
    count = size // 4
    header = npy_header('uint32', count)
    path = os.path.join(HERE, '.data', f'link-{size}.npy')
    if os.path.exists(path) and os.path.getsize(path) == len(header) + count * 4:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(0)
    with open(f'{path}.tmp', 'wb') as f:
        f.write(header)
        for start in range(0, count, 16 * MIB):
            f.write(rng.integers(0, 1 << 17, min(16 * MIB, count - start), np.uint32).tobytes())
    os.replace(f'{path}.tmp', path)
    return path


def _summary(stats: dict) -> dict:
    keep = ('requests', 'get_requests', 'head_requests', 'connections', 'max_in_flight',
            'mean_in_flight', 'median_ttfb_s', 'bytes_out')
    return {k: stats.get(k) for k in keep}


def bench_link_download(args: argparse.Namespace, scratch: str) -> dict:
    import boto3
    from boto3.s3.transfer import TransferConfig

    from benchmarks.linkemu import PROFILES, LinkEmulator
    from benchmarks.linkemu_check import report, self_check
    from streaming.storage import download_file
    from streaming.storage.download import DownloadConfig
    from streaming.tokens.store import download_config
    profile = PROFILES[args.profile]
    source = cached_npy(bytes_to_int(args.size))
    size = os.path.getsize(source)
    print(f'download: emulator self-check ({args.profile}), load {os.getloadavg()[0]:.1f}',
          flush=True)
    check = self_check(profile, seconds=2.0)
    print('  ' + report(check).replace('\n', '\n  '), flush=True)
    root = os.path.join(scratch, 'link-served')
    os.makedirs(root)
    try:  # A hard link: the server refuses paths that resolve outside its root.
        os.link(source, os.path.join(root, 'big.npy'))
    except OSError:
        shutil.copyfile(source, os.path.join(root, 'big.npy'))
    with open(os.path.join(root, 'warm.npy'), 'wb') as f:
        f.write(os.urandom(4 * MIB))
    proc, upstream = serve(root, 0, 0)
    out = os.path.join(scratch, 'link-out.npy')
    boto_config = TransferConfig()
    config, plain = download_config(), DownloadConfig.from_env()  # ShardStore's, the layer's
    names = ['ours', 'boto3'] + (['ours_layer_default'] if plain != config else [])
    rates: dict[str, list[float]] = {name: [] for name in names}
    counters: dict[str, list[dict]] = {name: [] for name in names}
    loads: list[float] = []
    try:
        with LinkEmulator(upstream, profile) as link:
            point_s3_at(link.endpoint)
            client = boto3.client('s3', endpoint_url=link.endpoint, aws_access_key_id='bench',
                                  aws_secret_access_key='bench', region_name='us-east-1')
            print(f'  {size / MIB:.0f} MiB; ours {config.concurrency} x '
                  f'{config.part_size // MIB} MiB parts (ShardStore), boto3 '
                  f'{boto_config.max_request_concurrency} x '
                  f'{boto_config.multipart_chunksize // MIB} MiB', flush=True)
            download_file('s3://bench/warm.npy', out, timeout=60)
            client.download_file('bench', 'warm.npy', out, Config=boto_config)
            os.remove(out)
            for repeat in range(args.repeats):
                shift = repeat % len(names)
                for name in names[shift:] + names[:shift]:
                    link.reset()
                    started, cpu = time.perf_counter(), time.process_time()
                    if name.startswith('ours'):
                        download_file('s3://bench/big.npy', out, timeout=60, size=size,
                                      config=config if name == 'ours' else plain)
                    else:
                        client.download_file('bench', 'big.npy', out, Config=boto_config)
                    seconds = time.perf_counter() - started
                    cpu = time.process_time() - cpu
                    assert os.path.getsize(out) == size
                    os.remove(out)
                    stats = _summary(link.stats())
                    stats['client_cpu_s'] = cpu
                    counters[name].append(stats)
                    loads.append(os.getloadavg()[0])
                    rates[name].append(size / seconds / 1e6)
                    print(f'  {name:<6} {seconds:6.2f} s {rates[name][-1]:6.1f} MB/s '
                          f'({rates[name][-1] * 1e6 / profile.link_rate:.2f} of the link); '
                          f'{stats["requests"]}, in flight max {stats["max_in_flight"]} '
                          f'mean {stats["mean_in_flight"]:.1f}; client CPU {cpu:.1f} s; '
                          f'load {loads[-1]:.1f}',
                          flush=True)
    finally:
        stop(proc)
    ours, boto = statistics.median(rates['ours']), statistics.median(rates['boto3'])
    result = {'profile': args.profile, 'size_bytes': size, 'link_mb_s': profile.link_rate / 1e6,
              'ours_mb_s': rates['ours'], 'boto3_mb_s': rates['boto3'],
              'ours_median': ours, 'boto3_median': boto,
              'ours_vs_link': ours * 1e6 / profile.link_rate,
              'boto3_vs_link': boto * 1e6 / profile.link_rate, 'ours_vs_boto3': ours / boto,
              'counters': counters, 'client_cpu_s_median': {
                  name: statistics.median(c['client_cpu_s'] for c in runs)
                  for name, runs in counters.items()}, 'load_average': loads,
              'ours_config': {'part_size': config.part_size, 'concurrency': config.concurrency},
              'layer_default_median': statistics.median(rates.get('ours_layer_default') or
                                                        [float('nan')]),
              'self_check': {k: v for k, v in check.items() if not k.endswith('_stats')}}
    print(f'  median: ours {ours:.1f} MB/s = {result["ours_vs_link"]:.2f} of the link (target '
          f'>= 0.8), boto3 {boto:.1f} MB/s = {result["boto3_vs_link"]:.2f}; ours/boto3 '
          f'{result["ours_vs_boto3"]:.2f}x (target >= 1.3); self-check on '
          f'{check["connections"]} connections {check["aggregate_mb_per_s"]:.1f} MB/s',
          flush=True)
    return result
