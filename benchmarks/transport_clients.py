"""The S3 read clients that ``benchmarks.transport_bench`` compares, and its worker process.

Each client is one adapter with the same two calls: build it for an endpoint and a bucket, and
``fetch(key, start, end)`` one object or byte range, streaming the body and dropping it, timed
to its first byte. The worker runs one client in a fresh process (so import time, start-up and
CPU time are that client's alone) and prints one JSON line::

    python -m benchmarks.transport_clients CLIENT --endpoint URL --bucket B --task bench ...

Clients (each configured as the download layer would use it: its own retries off, since
``streaming.storage.retry`` retries every backend under one policy):

- ``s3_light``: ours today, ``streaming.storage.s3.S3Backend.read`` over ``s3_light``;
- ``boto3``: the same backend with ``STREAMING_S3_CLIENT=boto3`` (botocore over urllib3);
- ``obstore``: Rust ``object_store`` (``obstore.store.S3Store``, sync API, streamed);
- ``awscrt``: AWS's Common Runtime S3 client (``awscrt.s3.S3Client``), what ``boto3[crt]``'s
  transfer manager runs on;
- ``mountpoint``: ``s3torchconnectorclient.MountpointS3Client``, the Rust client on the CRT
  beneath ``s3torchconnector``;
- Azure Blob Storage: ``azure`` (ours, ``streaming.storage.azure`` on the Azure SDK) and
  ``obstore-azure`` (``obstore.store.AzureStore``).

Only the standard library is imported at module level: the worker's import time is the client's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from urllib.parse import urlsplit

CLIENTS = ('s3_light', 'boto3', 'obstore', 'awscrt', 'mountpoint')
# Not run by default: obstore collecting each body into one buffer (``GetResult.bytes``).
VARIANTS = ('obstore-bytes',)
# Azure Blob Storage (``--store azure``): ours (the Azure SDK) and obstore's ``AzureStore``.
AZURE_CLIENTS = ('azure', 'obstore-azure')
# What each client needs importable (the bench reports a client whose module is missing).
MODULES = {'s3_light': 'streaming', 'boto3': 'boto3', 'obstore': 'obstore', 'awscrt': 'awscrt',
           'mountpoint': 's3torchconnectorclient', 'obstore-bytes': 'obstore',
           'azure': 'azure.storage.blob', 'obstore-azure': 'obstore'}
CHUNK = 256 << 10
TIMEOUT = 60.0
Fetch = Callable[[str, 'int | None', 'int | None'], 'tuple[int, float]']


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all its threads (native ones included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _drain(chunks: Any, started: float) -> tuple[int, float]:
    """Bytes in ``chunks`` and the seconds from ``started`` to the first of them."""
    total, first = 0, -1.0
    for chunk in chunks:
        if first < 0:
            first = time.perf_counter() - started
        total += len(chunk)
    return total, first


# ---- adapters: each returns fetch(key, start, end) -> (bytes, seconds to first byte) ---------
def _backend_client(endpoint: str, bucket: str, boto: bool) -> Fetch:
    os.environ['S3_ENDPOINT_URL'] = endpoint
    os.environ['STREAMING_S3_CLIENT'] = 'boto3' if boto else 'auto'
    from streaming.storage.s3 import S3Backend
    return _through_backend(S3Backend(), f's3://{bucket}/')


def _through_backend(backend: Any, prefix: str) -> Fetch:
    """``fetch`` through one of our backends' ``read`` (the download layer's call)."""
    def fetch(key: str, start: int | None = None, end: int | None = None) -> tuple[int, float]:
        started = time.perf_counter()
        response = backend.read(f'{prefix}{key}', start or 0, end, timeout=TIMEOUT)
        return _drain(response.chunks, started)
    return fetch


def _import_backend() -> None:
    import streaming.storage.s3  # noqa: F401  (what an s3:// URL imports today)


def _obstore_client(endpoint: str, bucket: str, whole: bool = False) -> Fetch:
    from datetime import timedelta

    from obstore.store import S3Store
    unsigned = os.environ.get('S3_UNSIGNED') == '1'
    store = S3Store(bucket, endpoint=endpoint, region=os.environ.get('AWS_DEFAULT_REGION'),
                    skip_signature=unsigned,
                    client_options={'allow_http': True, 'timeout': f'{int(TIMEOUT)}s',
                                    'connect_timeout': '60s'},
                    retry_config={'max_retries': 0, 'retry_timeout': timedelta(0)})
    return _through_obstore(store, whole)


def _through_obstore(store: Any, whole: bool = False) -> Fetch:
    """``fetch`` with ``obstore.get``: streamed in ``CHUNK`` pieces, or one buffer (``whole``)."""
    import obstore

    def fetch(key: str, start: int | None = None, end: int | None = None) -> tuple[int, float]:
        started = time.perf_counter()
        options = {'range': (start or 0, end)} if end is not None else None
        result = obstore.get(store, key, options=options)
        return _drain([result.bytes()] if whole else result.stream(min_chunk_size=CHUNK),
                      started)
    return fetch


def _awscrt_client(endpoint: str, bucket: str) -> Fetch:
    from awscrt.auth import AwsCredentialsProvider
    from awscrt.http import HttpHeaders, HttpRequest
    from awscrt.io import ClientBootstrap, DefaultHostResolver, EventLoopGroup
    from awscrt.s3 import S3Client, S3RequestTlsMode, S3RequestType
    parts = urlsplit(endpoint)
    group = EventLoopGroup()
    bootstrap = ClientBootstrap(group, DefaultHostResolver(group))
    unsigned = os.environ.get('S3_UNSIGNED') == '1'
    client = S3Client(bootstrap=bootstrap, region=os.environ.get('AWS_DEFAULT_REGION',
                                                                 'us-east-1'),
                      credential_provider=None if unsigned else
                      AwsCredentialsProvider.new_default_chain(bootstrap),
                      tls_mode=S3RequestTlsMode.DISABLED if parts.scheme == 'http' else
                      S3RequestTlsMode.ENABLED, throughput_target_gbps=1.0)

    def fetch(key: str, start: int | None = None, end: int | None = None) -> tuple[int, float]:
        headers = HttpHeaders([('Host', parts.netloc)])
        if end is not None:
            headers.add('Range', f'bytes={start or 0}-{end - 1}')
        state = {'bytes': 0, 'first': -1.0}
        started = time.perf_counter()

        def on_body(chunk: bytes, **_: Any) -> None:
            if state['first'] < 0:
                state['first'] = time.perf_counter() - started
            state['bytes'] += len(chunk)

        request = client.make_request(type=S3RequestType.GET_OBJECT, on_body=on_body,
                                      request=HttpRequest('GET', f'/{bucket}/{key}', headers))
        request.finished_future.result(TIMEOUT * 4)
        return int(state['bytes']), state['first']
    return fetch


def _mountpoint_client(endpoint: str, bucket: str) -> Fetch:
    from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client
    client = MountpointS3Client(os.environ.get('AWS_DEFAULT_REGION', 'us-east-1'),
                                endpoint=endpoint, force_path_style=True, max_attempts=1,
                                unsigned=os.environ.get('S3_UNSIGNED') == '1',
                                profile=os.environ.get('AWS_PROFILE'))

    def fetch(key: str, start: int | None = None, end: int | None = None) -> tuple[int, float]:
        started = time.perf_counter()
        return _drain(client.get_object(bucket, key, start, end), started)
    return fetch


def _azure_backend_client(endpoint: str, container: str) -> Fetch:
    os.environ['AZURE_STORAGE_ENDPOINT'] = endpoint
    from streaming.storage.azure import AzureBackend
    return _through_backend(AzureBackend(), f'azure://{container}/')


def _obstore_azure_client(endpoint: str, container: str) -> Fetch:
    from datetime import timedelta

    from obstore.store import AzureStore
    store = AzureStore(container, account_name=os.environ['AZURE_ACCOUNT_NAME'],
                       account_key=os.environ['AZURE_ACCOUNT_ACCESS_KEY'], endpoint=endpoint,
                       client_options={'allow_http': True, 'timeout': f'{int(TIMEOUT)}s'},
                       retry_config={'max_retries': 0, 'retry_timeout': timedelta(0)})
    return _through_obstore(store)


IMPORTS: dict[str, Callable[[], Any]] = {
    's3_light': _import_backend, 'boto3': _import_backend,
    'obstore': lambda: __import__('obstore.store'),
    'obstore-bytes': lambda: __import__('obstore.store'),
    'azure': lambda: __import__('streaming.storage.azure'),
    'obstore-azure': lambda: __import__('obstore.store'),
    'awscrt': lambda: __import__('awscrt.s3'),
    'mountpoint': lambda: __import__('s3torchconnectorclient._mountpoint_s3_client'),
}
BUILDERS: dict[str, Callable[[str, str], Fetch]] = {
    's3_light': lambda e, b: _backend_client(e, b, boto=False),
    'boto3': lambda e, b: _backend_client(e, b, boto=True),
    'obstore': _obstore_client, 'awscrt': _awscrt_client, 'mountpoint': _mountpoint_client,
    'obstore-bytes': lambda e, b: _obstore_client(e, b, whole=True),
    'azure': _azure_backend_client, 'obstore-azure': _obstore_azure_client,
}


# ---- the worker's tasks -----------------------------------------------------------------------
def _many(fetch: Fetch, jobs: list[tuple[str, int | None, int | None]], in_flight: int
          ) -> dict[str, Any]:
    """``jobs`` with ``in_flight`` at a time: MB/s, CPU-seconds per GB, first bytes."""
    firsts: list[float] = []
    lock = threading.Lock()

    def one(job: tuple[str, int | None, int | None]) -> int:
        got, first = fetch(*job)
        with lock:
            firsts.append(first)
        return got

    cpu, wall = cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        total = sum(pool.map(one, jobs))
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    return {'bytes': total, 'mb_per_s': total / wall / 1e6, 'cpu_s_per_gb': cpu / (total / 1e9),
            'first_byte_median_s': statistics.median(firsts), 'seconds': wall}


def bench(client: str, endpoint: str, bucket: str, keys: list[str], size: int, part: int,
          in_flight: int, small_key: str) -> dict[str, Any]:
    """Import (on top of ``import streaming``), start-up (client built + one small GET), warm
    first byte, whole and ranged GETs."""
    result: dict[str, Any] = {'client': client}
    import streaming  # noqa: F401  (every job pays it; the figures are the client's on top)
    cpu, wall = cpu_seconds(), time.perf_counter()
    IMPORTS[client]()
    result['import_s'] = time.perf_counter() - wall
    result['import_cpu_s'] = cpu_seconds() - cpu
    cpu, wall = cpu_seconds(), time.perf_counter()
    fetch = BUILDERS[client](endpoint, bucket)
    fetch(small_key, None, None)
    result['startup_s'] = time.perf_counter() - wall
    result['startup_cpu_s'] = cpu_seconds() - cpu
    result['first_byte_s'] = statistics.median(fetch(small_key, None, None)[1] for _ in range(5))
    whole = _many(fetch, [(key, None, None) for key in keys], in_flight)
    if whole['bytes'] != size * len(keys):
        raise RuntimeError(f'{client}: {whole["bytes"]} bytes, expected {size * len(keys)}')
    result['whole'] = whole
    ranges = [(key, start, min(start + part, size)) for key in keys
              for start in range(0, size, part)]
    ranged = _many(fetch, ranges, in_flight)
    if ranged['bytes'] != size * len(keys):
        raise RuntimeError(f'{client}: {ranged["bytes"]} ranged bytes, expected '
                           f'{size * len(keys)}')
    result['ranged'] = ranged
    return result


def probe(client: str, endpoint: str, bucket: str, key: str) -> dict[str, Any]:
    """One GET against a stub server: bytes, elapsed, or the error it raised (type, message)."""
    started = time.perf_counter()
    try:
        IMPORTS[client]()
        got, _ = BUILDERS[client](endpoint, bucket)(key, None, None)
        return {'bytes': got, 'seconds': time.perf_counter() - started}
    except BaseException as error:  # noqa: BLE001 - the outcome is what is measured
        return {'error': type(error).__name__, 'message': str(error)[:300],
                'seconds': time.perf_counter() - started}


def fork_probe(client: str, endpoint: str, bucket: str, key: str, wait: float = 20.0
               ) -> dict[str, Any]:
    """One GET here, then one from a forked child with a client of its own (as a DataLoader
    worker makes): did the child finish, fail, or hang?"""
    IMPORTS[client]()
    BUILDERS[client](endpoint, bucket)(key, None, None)
    pid = os.fork()
    if pid == 0:  # The child: exit 0 with the bytes, 3 on an error; never returns.
        try:
            os._exit(0 if BUILDERS[client](endpoint, bucket)(key, None, None)[0] else 2)
        except BaseException:  # noqa: BLE001 - the exit status is the answer
            os._exit(3)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return {'child': 'ok' if code == 0 else f'failed (exit status {code})'}
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return {'child': f'hung (killed after {wait:.0f} s)'}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('client', choices=CLIENTS + VARIANTS + AZURE_CLIENTS)
    parser.add_argument('--task', choices=['bench', 'probe', 'fork'], required=True)
    parser.add_argument('--endpoint', required=True)
    parser.add_argument('--bucket', required=True)
    parser.add_argument('--keys', nargs='*', default=[])
    parser.add_argument('--size', type=int, default=0)
    parser.add_argument('--part', type=int, default=1 << 20)
    parser.add_argument('--in-flight', type=int, default=32)
    parser.add_argument('--small', default='small')
    args = parser.parse_args(argv)
    if args.task == 'bench':
        out = bench(args.client, args.endpoint, args.bucket, args.keys, args.size, args.part,
                    args.in_flight, args.small)
    elif args.task == 'fork':
        out = fork_probe(args.client, args.endpoint, args.bucket, args.keys[0])
    else:
        out = probe(args.client, args.endpoint, args.bucket, args.keys[0])
    sys.stdout.write(json.dumps(out) + '\n')
    sys.stdout.flush()
    os._exit(0)  # Native clients' threads would otherwise delay the exit.


if __name__ == '__main__':
    main()
