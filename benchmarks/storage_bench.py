"""Storage benchmarks against moto's S3 server on 127.0.0.1 (started and stopped here).

    .venv/bin/python benchmarks/storage_bench.py                 # ranged vs single GET, 1 GiB
    .venv/bin/python benchmarks/storage_bench.py --size 256mb    # a smaller object
    .venv/bin/python benchmarks/storage_bench.py --epoch         # + cold epoch, ours vs reference

``ranged``: one object of ``--size`` random bytes in moto, downloaded with one streamed GET and
with parallel ranged GETs (``--part-size``, ``--concurrency``); ``--boto3`` adds boto3's own
``download_file`` (s3transfer) as a yardstick. moto reads the whole object to answer each ranged
GET, so on moto ranges cost O(object size) each and lose; the same comparison is then run
against a small HTTP server on loopback that serves a range at the cost of the range and caps
each connection at ``--throttle`` bytes/s, as cloud object stores cap a connection.

``--epoch``: a dataset written with MDSWriter to the server, then one cold epoch (empty cache)
with StreamingDataset + DataLoader, ours and the reference's (mosaicml-streaming 0.13.0 in
$STREAMING_REFERENCE_PYTHON, see scripts/reference_env.sh) in the same run. Everything is
deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from streaming.util import bytes_to_int  # noqa: E402
from tests.storage import servers  # noqa: E402

KEY, SECRET = 'bench-key', 'bench-secret'


def client(endpoint: str):
    import boto3
    from botocore.config import Config
    return boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=KEY,
                        aws_secret_access_key=SECRET, region_name='us-east-1',
                        config=Config(max_pool_connections=32))


def put_random(s3, bucket: str, key: str, size: int, scratch: str) -> None:
    from boto3.s3.transfer import TransferConfig
    path = os.path.join(scratch, 'source.bin')
    with open(path, 'wb') as f:
        left = size
        while left:
            block = min(left, 64 << 20)
            f.write(os.urandom(block))
            left -= block
    s3.upload_file(path, bucket, key, Config=TransferConfig(multipart_chunksize=64 << 20))
    os.remove(path)


def timed(label: str, size: int, fn) -> float:
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    rate = size / seconds / (1 << 20)
    print(f'  {label:<44} {seconds:7.2f} s  {rate:8.1f} MiB/s', flush=True)
    return rate


def bench_ranged(endpoint: str, bucket: str, args: argparse.Namespace, scratch: str,
                 label: str = '') -> dict:
    from boto3.s3.transfer import TransferConfig

    from streaming.storage import DownloadConfig, download_file
    s3 = client(endpoint)
    os.environ['S3_ENDPOINT_URL'] = endpoint
    from streaming.storage import registry
    registry._instances.clear()  # Clients for the new endpoint.
    size = bytes_to_int(args.size)
    print(f'ranged vs single GET{label}: {size / (1 << 20):.0f} MiB object, part size '
          f'{args.part_size}, concurrency {args.concurrency}', flush=True)
    put_random(s3, bucket, 'big.bin', size, scratch)
    out = os.path.join(scratch, 'out.bin')
    single = DownloadConfig(ranged_threshold=size + 1)
    ranged = DownloadConfig(part_size=bytes_to_int(args.part_size), concurrency=args.concurrency)
    results = {}
    for _ in range(args.repeat):
        results.setdefault('single', []).append(timed(
            'streaming: one GET', size,
            lambda: download_file(f's3://{bucket}/big.bin', out, config=single, timeout=300)))
        os.remove(out)
        results.setdefault('ranged', []).append(timed(
            'streaming: parallel ranged GETs', size,
            lambda: download_file(f's3://{bucket}/big.bin', out, config=ranged, timeout=300)))
        os.remove(out)
        if args.boto3:
            results.setdefault('boto3', []).append(timed(
                'boto3 download_file (s3transfer, 10 threads)', size,
                lambda: s3.download_file(bucket, 'big.bin', out, Config=TransferConfig())))
            os.remove(out)
    s3.delete_object(Bucket=bucket, Key='big.bin')
    best = {k: max(v) for k, v in results.items()}
    print(f'  best: ranged {best["ranged"]:.1f} MiB/s vs single {best["single"]:.1f} MiB/s '
          f'({best["ranged"] / best["single"]:.2f}x)', flush=True)
    return best


def bench_http_ranges(args: argparse.Namespace, scratch: str) -> dict:
    """The same comparison against a server that serves a range at the cost of the range (moto
    reads the whole object for each ranged GET), each connection capped as cloud stores cap them.
    """
    from streaming.storage import DownloadConfig, download_file
    size = bytes_to_int(args.size)
    rate = bytes_to_int(args.throttle)
    source = os.path.join(scratch, 'served.bin')
    with open(source, 'wb') as f:
        for _ in range(0, size, 64 << 20):
            f.write(os.urandom(min(64 << 20, size - f.tell())))

    class Ranges(servers.Quiet):
        def do_HEAD(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header('Content-Length', str(size))
            self.send_header('Accept-Ranges', 'bytes')
            self.send_header('ETag', '"v1"')
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            start, end = 0, size
            spec = self.headers.get('Range')
            if spec:
                first, _, last = spec.removeprefix('bytes=').partition('-')
                start, end = int(first), (int(last) + 1 if last else size)
                self.send_response(206)
                self.send_header('Content-Range', f'bytes {start}-{end - 1}/{size}')
            else:
                self.send_response(200)
            self.send_header('Content-Length', str(end - start))
            self.send_header('ETag', '"v1"')
            self.end_headers()
            began = time.monotonic()
            with open(source, 'rb') as f:
                for offset in range(start, end, 1 << 20):
                    self.wfile.write(os.pread(f.fileno(), min(1 << 20, end - offset), offset))
                    ahead = (offset - start + (1 << 20)) / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)

    server = servers.Threaded(Ranges)
    url = f'{server.url}/served.bin'
    out = os.path.join(scratch, 'out.bin')
    print(f'ranged vs single GET, range-efficient HTTP server, each connection capped at '
          f'{args.throttle}/s: {size / (1 << 20):.0f} MiB, part size {args.part_size}, '
          f'concurrency {args.concurrency}', flush=True)
    best: dict[str, float] = {}
    try:
        for _ in range(args.repeat):
            for name, config in [
                    ('one GET', DownloadConfig(ranged_threshold=size + 1)),
                    ('parallel ranged GETs', DownloadConfig(
                        part_size=bytes_to_int(args.part_size), concurrency=args.concurrency))]:
                rate_seen = timed(f'streaming: {name}', size, lambda c=config: download_file(
                    url, out, config=c, timeout=300))
                best[name] = max(best.get(name, 0.0), rate_seen)
                os.remove(out)
    finally:
        server.stop()
        os.remove(source)
    print(f'  best: ranged {best["parallel ranged GETs"]:.1f} MiB/s vs single '
          f'{best["one GET"]:.1f} MiB/s '
          f'({best["parallel ranged GETs"] / best["one GET"]:.2f}x)', flush=True)
    return best


_EPOCH = r'''
import importlib.machinery, json, sys, time, types
# The reference imports torchvision, whose PyPI build cannot load beside the CPU torch here; its
# dataset code never calls it (as in tests/oracle/ref_driver.py).
for name, attrs in [('torchvision', {}), ('torchvision.datasets', {'VisionDataset': object}),
                    ('torchvision.transforms', {}),
                    ('torchvision.transforms.functional', {'to_tensor': None})]:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules.setdefault(name, module)
from streaming import StreamingDataset
from torch.utils.data import DataLoader
remote, local, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
started = time.perf_counter()
dataset = StreamingDataset(remote=remote, local=local, batch_size=64, shuffle=False)
count = 0
for batch in DataLoader(dataset, batch_size=64, num_workers=workers):
    count += len(batch['id'])
print(json.dumps({'samples': count, 'seconds': time.perf_counter() - started}))
'''


def bench_epoch(endpoint: str, bucket: str, args: argparse.Namespace, scratch: str) -> dict:
    import numpy as np

    from streaming import MDSWriter
    remote = f's3://{bucket}/epoch'
    print(f'cold epoch: {args.samples} samples of {args.sample_bytes} bytes, shards of '
          f'{args.shard_size}, {args.workers} DataLoader workers', flush=True)
    with MDSWriter(out=remote, columns={'id': 'int', 'data': 'bytes'},
                   size_limit=args.shard_size, max_workers=4) as writer:
        rng = np.random.default_rng(0)
        for i in range(args.samples):
            writer.write({'id': i, 'data': rng.bytes(args.sample_bytes)})
    pythons = {'streaming (ours)': sys.executable}
    reference = os.environ.get('STREAMING_REFERENCE_PYTHON')
    if reference:
        pythons['reference 0.13.0'] = reference
    else:
        print('  (no STREAMING_REFERENCE_PYTHON: reference skipped)')
    rates: dict[str, float] = {}
    for _ in range(args.repeat):
        for name, python in pythons.items():
            local = tempfile.mkdtemp(prefix='epoch-', dir=scratch)
            result = subprocess.run([python, '-c', _EPOCH, remote, local, str(args.workers)],
                                    capture_output=True, text=True, timeout=1800,
                                    cwd=tempfile.gettempdir() if python != sys.executable
                                    else None)
            shutil.rmtree(local, ignore_errors=True)
            if result.returncode != 0:
                print(f'  {name}: failed\n{result.stderr[-2000:]}')
                continue
            outcome = json.loads(result.stdout.strip().splitlines()[-1])
            rate = outcome['samples'] / outcome['seconds']
            assert outcome['samples'] == args.samples, outcome
            print(f'  {name:<20} {outcome["seconds"]:7.2f} s  {rate:10.0f} samples/s', flush=True)
            rates[name] = max(rates.get(name, 0.0), rate)
    if len(rates) == 2:
        ours, ref = rates['streaming (ours)'], rates['reference 0.13.0']
        print(f'  best: ours {ours:.0f} vs reference {ref:.0f} samples/s ({ours / ref:.2f}x)')
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--size', default='1gb', help='ranged benchmark object size')
    parser.add_argument('--part-size', default='64mb')
    parser.add_argument('--concurrency', type=int, default=8)
    parser.add_argument('--repeat', type=int, default=2)
    parser.add_argument('--no-ranged', action='store_true', help='skip the ranged benchmark')
    parser.add_argument('--boto3', action='store_true',
                        help="also time boto3's download_file (slow on moto: see below)")
    parser.add_argument('--throttle', default='64mb',
                        help='also compare against a range-efficient HTTP server that caps each '
                             'connection at this many bytes/s, as cloud stores do ("0": skip)')
    parser.add_argument('--epoch', action='store_true', help='also run the cold-epoch benchmark')
    parser.add_argument('--samples', type=int, default=50_000)
    parser.add_argument('--sample-bytes', type=int, default=1024)
    parser.add_argument('--shard-size', default='4mb')
    parser.add_argument('--workers', type=int, default=2)
    args = parser.parse_args()

    server = servers.moto_server()
    scratch = tempfile.mkdtemp(prefix='storage-bench-')
    os.environ.update(S3_ENDPOINT_URL=server.url, AWS_ACCESS_KEY_ID=KEY,
                      AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION='us-east-1')
    try:
        bucket = 'bench-bucket'
        client(server.url).create_bucket(Bucket=bucket)
        print(f'moto S3 server at {server.url}; {os.cpu_count()} cores', flush=True)
        if not args.no_ranged:
            bench_ranged(server.url, bucket, args, scratch)
            if args.throttle not in ('0', ''):
                bench_http_ranges(args, scratch)
        if args.epoch:
            bench_epoch(server.url, bucket, args, scratch)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    main()
