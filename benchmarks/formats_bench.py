"""Parquet streamed as it is: ours (``SourceStream``) vs LitData's ``ParquetLoader`` vs our MDS.

    .venv/bin/python -m benchmarks.formats_bench [--quick] [--repeats 3] [--index-files N]
                                                   [--remote] [--decode-once]

Read cases: the ``tokens`` (2 KiB per row) and ``images`` (~100 KB binary + int label) samples
of ``benchmarks/cases/sources.py``, written once as Parquet by ``pyarrow.parquet`` (snappy;
``tokens`` in 4 files of 5,000-row groups, ``images`` in 4 files of 100-row groups) and as MDS
by our ``MDSWriter`` (uncompressed, 64 MiB shards). ``images`` is read once more from an
uncompressed copy of its Parquet files (same row groups), to show what the codec costs. One
shuffled epoch through each library's DataLoader (batch 32, default collate) with 0 and 2
workers, each run in a fresh process with a fresh cache, alternating implementations for
``--repeats`` rounds; samples/s (whole epoch; ours reads the local files in place) and time to
first batch, medians.

Remote case (``--remote``): the ``images`` Parquet files on a moto S3 server behind
``benchmarks.linkemu``'s proxy (same-region profile: 40 ms to first byte, 12 MB/s per connection,
96 MB/s for the link), one cold shuffled epoch with 0 workers, the clock started before the
dataset is built (so indexing counts: ours reads the files' footers, LitData its ``index.json``,
uploaded beside them); time to first batch, samples/s, and the bytes that crossed the link over
the projected columns' compressed size (ours reads ``columns=['image']``; LitData has no
projection and fetches whole files).

Decode-once case (``--decode-once``, alone): ours on the compressed ``images`` and ``tokens``
Parquet with 0 workers, 2 workers sharing decoded units (the default) and 2 workers with
``STREAMING_SHARED_DECODE=0``: see ``decode_once_cases``. ``STREAMING_BENCH_SRC=/a/checkout``
measures that checkout's ``streaming`` (a base to compare with) with this benchmark.

Index case: ``--index-files`` tiny Parquet files on a moto S3 server (its own process), indexed
by ``streaming index``'s code path; seconds and the GET/LIST requests it made.

LitData runs in ``~/.cache/shardflow/litdata-parquet-env``: a venv over LitData 0.2.76's env
(``benchmarks/envs.py``) that adds pyarrow and polars, which its ParquetLoader needs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LITDATA_PARQUET_ENV = os.path.expanduser('~/.cache/shardflow/litdata-parquet-env')
BATCH = 32


# ---- workers (run in a fresh process; only the standard library at the top) -----------------
def _worker_ours(kind: str, path: str, workers: int, cache: str) -> dict:
    from streaming import SourceStream, StreamingDataLoader, StreamingDataset
    if kind == 'parquet':
        streams = [SourceStream(remote=path, local=cache)]
        dataset = StreamingDataset(streams=streams, batch_size=BATCH, shuffle=True)
    else:
        dataset = StreamingDataset(local=path, batch_size=BATCH, shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
    cpu = _cpu_seconds()
    result = _epoch(loader)
    # Kept workers joined now: their CPU time counts among this process's children.
    shutdown = getattr(getattr(loader, '_iterator', None), '_shutdown_workers', None)
    if shutdown is not None:
        shutdown()
    result['cpu_s'] = _cpu_seconds() - cpu
    if kind == 'parquet':  # Decodes made on the node, of all its units (cache.decoded_units).
        decodes = dataset.cache.decoded.decodes()
        # Each worker's fetch rate: its samples over its time waiting for shards and reading
        # them (decoding included), from the loader's telemetry; and over the CPU seconds its
        # process used meanwhile.
        rows = [w for w in loader.stats.workers() if w['samples']]
        rates = [w['samples'] / (w['read_s'] + w['shard_wait_s']) for w in rows]
        cpu_rates = [w['samples'] / w['fetch_cpu_s'] for w in rows if w.get('fetch_cpu_s')]
        result.update(units=len(decodes), decodes=int(decodes.sum()),
                      worker_rate=sum(rates) / len(rates),
                      worker_cpu_rate=sum(cpu_rates) / max(len(cpu_rates), 1),  # 0: unknown.
                      worker_fetch_s=[w['read_s'] + w['shard_wait_s'] for w in rows],
                      worker_fetch_cpu_s=[w.get('fetch_cpu_s', 0.0) for w in rows])
    return result


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its children that have been waited for."""
    import resource
    return sum(usage.ru_utime + usage.ru_stime for usage in
               (resource.getrusage(resource.RUSAGE_SELF),
                resource.getrusage(resource.RUSAGE_CHILDREN)))


def _worker_litdata(path: str, workers: int, cache: str) -> dict:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming.item_loader import ParquetLoader
    dataset = StreamingDataset(path, item_loader=ParquetLoader(), shuffle=True,
                               cache_dir=cache)
    # LitData refuses fork with its ParquetLoader (polars' thread pool would deadlock).
    context = {'multiprocessing_context': 'spawn'} if workers else {}
    return _epoch(StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers, **context))


def _worker_remote(impl: str, url: str, workers: int, cache: str, endpoint: str,
                   columns: list[str] | None) -> dict:
    """A cold epoch from S3 at ``endpoint``, the clock started before the dataset is built."""
    os.environ.update({'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing',
                       'AWS_DEFAULT_REGION': 'us-east-1'})
    if impl == 'litdata':
        from litdata import StreamingDataLoader, StreamingDataset
        from litdata.streaming import downloader
        from litdata.streaming.item_loader import ParquetLoader
        options = getattr(downloader, '_OBSTORE_CLIENT_OPTIONS', None)
        if isinstance(options, dict):  # Plain http to the loopback proxy (see cases/remote.py).
            options['allow_http'] = 'true'
        started = time.perf_counter()
        dataset = StreamingDataset(url, item_loader=ParquetLoader(), shuffle=True,
                                   cache_dir=cache, storage_options={'endpoint_url': endpoint})
        context = {'multiprocessing_context': 'spawn'} if workers else {}
        loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers, **context)
        return _epoch(loader, started)
    os.environ['S3_ENDPOINT_URL'] = endpoint
    from streaming import SourceStream, StreamingDataLoader, StreamingDataset
    started = time.perf_counter()
    dataset = StreamingDataset(streams=[SourceStream(remote=url, local=cache, columns=columns)],
                               batch_size=BATCH, shuffle=True)
    return _epoch(StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers), started)


def _epoch(loader, started: float | None = None) -> dict:  # noqa: ANN001
    started = time.perf_counter() if started is None else started
    first = None
    samples = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - started
        column = next(iter(batch.values()))
        samples += len(column)
    elapsed = time.perf_counter() - started
    return {'samples': samples, 'seconds': elapsed, 'samples_per_s': samples / elapsed,
            'first_batch_s': first}


def worker_main(argv: list[str]) -> None:
    impl, kind, path, workers, cache = argv[0], argv[1], argv[2], int(argv[3]), argv[4]
    if kind == 'remote':
        result = _worker_remote(impl, path, workers, cache, argv[5],
                                argv[6].split(',') if argv[6] else None)
    elif impl == 'litdata':
        result = _worker_litdata(path, workers, cache)
    else:
        result = _worker_ours(kind, path, workers, cache)
    print('RESULT ' + json.dumps(result), flush=True)


# ---- data ---------------------------------------------------------------------------------
def make_data(data_dir: str, name: str, samples: int) -> tuple[str, str]:
    """(Parquet directory, MDS directory) of dataset ``name``; written once."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.cases.sources import Source, generate, is_generated
    from streaming import MDSWriter
    if not is_generated(data_dir, name, samples):
        generate(data_dir, name, samples)
    source = Source(data_dir, name)
    parquet_dir = os.path.join(data_dir, f'{name}-parquet')
    mds_dir = os.path.join(data_dir, f'{name}-mds')
    done = os.path.join(data_dir, f'{name}.done')
    if os.path.exists(done):
        return parquet_dir, mds_dir
    files, group = 4, 5000 if name == 'tokens' else 100
    per_file = -(-samples // files)
    os.makedirs(parquet_dir, exist_ok=True)
    for f in range(files):
        rows = [source[i] for i in range(f * per_file, min((f + 1) * per_file, samples))]
        table = pa.Table.from_pylist(rows)
        if 'label' in table.column_names:
            table = table.set_column(table.column_names.index('label'), 'label',
                                     pa.array(np.array([r['label'] for r in rows], np.int64)))
        pq.write_table(table, os.path.join(parquet_dir, f'part-{f:03d}.parquet'),
                       row_group_size=group, compression='snappy')
    from benchmarks.cases.sources import COLUMNS
    with MDSWriter(out=mds_dir, columns=COLUMNS[name], size_limit='64mb') as writer:
        for sample in source:
            writer.write(sample)
    open(done, 'w').close()
    return parquet_dir, mds_dir


def uncompressed_copy(parquet_dir: str) -> str:
    """The Parquet files of ``parquet_dir`` written again without compression (same row groups)."""
    import pyarrow.parquet as pq
    out = parquet_dir + '-uncompressed'
    done = os.path.join(out, '.done')
    if os.path.exists(done):
        return out
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(parquet_dir)):
        if name.endswith('.parquet'):
            source = pq.ParquetFile(os.path.join(parquet_dir, name))
            with pq.ParquetWriter(os.path.join(out, name), source.schema_arrow,
                                  compression='none') as writer:
                for group in range(source.num_row_groups):
                    writer.write_table(source.read_row_group(group))
    open(done, 'w').close()
    return out


def litdata_index(parquet_dir: str) -> None:
    """LitData's own index of the Parquet files (its ``index.json`` in the directory)."""
    subprocess.run([os.path.join(LITDATA_PARQUET_ENV, 'bin', 'python'), '-c',
                    'import sys, litdata; litdata.index_parquet_dataset(sys.argv[1])',
                    parquet_dir], check=True, capture_output=True)


def run_once(impl: str, kind: str, path: str, workers: int, scratch: str,
             extra: tuple[str, ...] = (), env_extra: dict[str, str] | None = None) -> dict:
    import shutil
    import uuid
    cache = os.path.join(scratch, f'cache-{uuid.uuid4().hex[:8]}')
    python = os.path.join(LITDATA_PARQUET_ENV, 'bin', 'python') if impl == 'litdata' else \
        sys.executable
    # Ours: this checkout, or the one ``STREAMING_BENCH_SRC`` names (a base to compare with).
    env = {**os.environ, 'PYTHONPATH': os.environ.get('STREAMING_BENCH_SRC') or REPO} \
        if impl != 'litdata' else \
        {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(env_extra or {})
    try:
        proc = subprocess.run([python, os.path.abspath(__file__), 'worker', impl, kind, path,
                               str(workers), cache, *extra], capture_output=True, text=True,
                              env=env,
                              timeout=1800, cwd=scratch)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for line in proc.stdout.splitlines():
        if line.startswith('RESULT '):
            return json.loads(line[len('RESULT '):])
    raise RuntimeError(f'{impl} {kind} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}')


def read_cases(data_dir: str, scale: float, repeats: int) -> list[dict]:
    rows = []
    scratch = os.path.join(data_dir, 'scratch')
    os.makedirs(scratch, exist_ok=True)
    for name, samples, compressed in (('tokens', int(100_000 * scale), True),
                                      ('images', int(2_000 * scale), True),
                                      ('images', int(2_000 * scale), False)):
        parquet_dir, mds_dir = make_data(data_dir, name, samples)
        if not compressed:  # The same row groups, no codec: what is left is the format's cost.
            parquet_dir = uncompressed_copy(parquet_dir)
        litdata_index(parquet_dir)
        for workers in (0, 2):
            runs: dict[str, list[dict]] = {'ours-parquet': [], 'litdata-parquet': [],
                                          'ours-mds': []}
            for _ in range(repeats):
                runs['ours-parquet'].append(run_once('ours', 'parquet', parquet_dir, workers,
                                                     scratch))
                runs['litdata-parquet'].append(run_once('litdata', 'parquet', parquet_dir,
                                                        workers, scratch))
                runs['ours-mds'].append(run_once('ours', 'mds', mds_dir, workers, scratch))
            for impl, results in runs.items():
                assert all(r['samples'] == samples for r in results), (impl, results)
            row = {'dataset': name if compressed else f'{name}, uncompressed Parquet',
                   'samples': samples, 'workers': workers}
            for impl, results in runs.items():
                row[impl] = statistics.median(r['samples_per_s'] for r in results)
                row[f'{impl} first batch s'] = statistics.median(r['first_batch_s']
                                                                 for r in results)
            row['vs litdata'] = row['ours-parquet'] / row['litdata-parquet']
            row['vs our mds'] = row['ours-parquet'] / row['ours-mds']
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


# ---- decode once per node ------------------------------------------------------------------
def decode_once_cases(data_dir: str, scale: float, repeats: int) -> list[dict]:
    """Ours on compressed Parquet: 0 workers, 2 workers sharing decoded units, 2 without.

    Per row: samples/s of the epoch (median) and per worker over the 0-worker rate; each
    worker's fetch rate (samples over its seconds waiting for and reading shards, decoding
    included: ``loader.stats``) over the 0-worker process's, and per CPU second of it
    (``fetch_cpu_s``); the node's decodes per unit (``STREAMING_SHARED_DECODE=0``: each worker
    decodes what it reads); CPU seconds of the epoch (the loader's process and its workers).
    ``scale`` 4 (``--decode-scale``, default): 16 units of 50 MB per dataset; 1: the 4 units
    of the figures before 2026-11-28 22:00.
    """
    if scale != 1:  # ``make_data`` keeps one size per directory.
        data_dir = os.path.join(data_dir, f'x{scale:g}')
    scratch = os.path.join(data_dir, 'scratch')
    os.makedirs(scratch, exist_ok=True)
    # All 16 units kept decoded (512 MiB by default: 0 workers would decode them per batch).
    held = {'STREAMING_DECODED_BYTES': str(4 << 30)}
    setups = {'0 workers': (0, held), '2 workers, shared': (2, held),
              '2 workers, not shared': (2, {**held, 'STREAMING_SHARED_DECODE': '0'})}
    rows = []
    for name, samples in (('images', int(2_000 * scale)), ('tokens', int(100_000 * scale))):
        parquet_dir, _ = make_data(data_dir, name, samples)
        runs: dict[str, list[dict]] = {setup: [] for setup in setups}
        for _ in range(repeats):
            for setup, (workers, env) in setups.items():
                runs[setup].append(run_once('ours', 'parquet', parquet_dir, workers, scratch,
                                            env_extra=env))
        alone = statistics.median(r['samples_per_s'] for r in runs['0 workers'])
        alone_fetch = statistics.median(r['worker_rate'] for r in runs['0 workers'])
        alone_cpu = statistics.median(r['worker_cpu_rate'] for r in runs['0 workers'])
        for setup, results in runs.items():
            assert all(r['samples'] == samples for r in results), (setup, results)
            rate = statistics.median(r['samples_per_s'] for r in results)
            workers = setups[setup][0]
            worker_rate = statistics.median(r['worker_rate'] for r in results)
            row = {'dataset': name, 'samples': samples, 'setup': setup,
                   'samples_per_s': rate, 'runs': [r['samples_per_s'] for r in results],
                   'epoch_rate_per_worker_vs_0_workers': rate / max(workers, 1) / alone,
                   'worker_fetch_rate': worker_rate,
                   'fetch_rate_vs_0_workers': worker_rate / alone_fetch,
                   'fetch_cpu_rate_vs_0_workers': statistics.median(
                       r['worker_cpu_rate'] for r in results) / alone_cpu if alone_cpu else None,
                   'fetch_s': [r['worker_fetch_s'] for r in results],
                   'fetch_cpu_s': [r['worker_fetch_cpu_s'] for r in results],
                   'decodes_per_unit': statistics.median(r['decodes'] / r['units']
                                                         for r in results),
                   'cpu_s': statistics.median(r['cpu_s'] for r in results),
                   'units': results[0]['units'], 'load': os.getloadavg()}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


# ---- remote: S3 through the link emulator --------------------------------------------------
REMOTE_COLUMNS = ['image']


def projected_bytes(parquet_dir: str, columns: list[str] | None) -> int:
    """The compressed size of ``columns`` (all if None) over the files' row groups."""
    import pyarrow.parquet as pq
    total = 0
    for name in sorted(os.listdir(parquet_dir)):
        if not name.endswith('.parquet'):
            continue
        meta = pq.read_metadata(os.path.join(parquet_dir, name))
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                column = group.column(c)
                if columns is None or column.path_in_schema.split('.')[0] in columns:
                    total += column.total_compressed_size
    return total


def remote_case(data_dir: str, scale: float, repeats: int, profile_name: str) -> dict:
    """Ours and LitData, cold shuffled epochs of ``images`` from moto behind the link emulator."""
    from benchmarks.linkemu import PROFILES, LinkEmulator
    from benchmarks.s3 import MotoServer
    samples = int(2_000 * scale)
    parquet_dir, _ = make_data(data_dir, 'images', samples)
    litdata_index(parquet_dir)
    scratch = os.path.join(data_dir, 'scratch')
    os.makedirs(scratch, exist_ok=True)
    projected = {'ours': projected_bytes(parquet_dir, REMOTE_COLUMNS),
                 'litdata': projected_bytes(parquet_dir, None)}
    runs: dict[str, list[dict]] = {'ours': [], 'litdata': []}
    with MotoServer('formats') as s3:
        client = s3.client()
        for name in sorted(os.listdir(parquet_dir)):  # Not our sidecar: ours indexes cold.
            if name.endswith('.parquet') or name == 'index.json':
                client.upload_file(os.path.join(parquet_dir, name), 'formats',
                                   f'images/{name}')
        with LinkEmulator(s3.endpoint, PROFILES[profile_name]) as link:
            for _ in range(repeats):
                for impl in runs:
                    link.reset()
                    columns = ','.join(REMOTE_COLUMNS) if impl == 'ours' else ''
                    result = run_once(impl, 'remote', 's3://formats/images', 0, scratch,
                                      (link.endpoint, columns))
                    stats = link.stats()
                    result.update(bytes_fetched=stats['bytes_out'],
                                  gets=stats['get_requests'],
                                  fetched_over_projected=stats['bytes_out'] / projected[impl])
                    assert result['samples'] == samples, (impl, result)
                    runs[impl].append(result)
                    print(impl, json.dumps(result), flush=True)
    out: dict = {'dataset': 'images', 'samples': samples, 'profile': profile_name,
                 'workers': 0, 'ours columns': REMOTE_COLUMNS,
                 'projected bytes': projected}
    for impl, results in runs.items():
        for key in ('samples_per_s', 'first_batch_s', 'bytes_fetched', 'gets',
                    'fetched_over_projected'):
            out[f'{impl} {key}'] = statistics.median(r[key] for r in results)
    out['first batch ours / litdata'] = out['ours first_batch_s'] / out['litdata first_batch_s']
    return out


# ---- index build on moto ------------------------------------------------------------------
def index_case(files: int, data_dir: str) -> dict:
    import io

    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streaming.sources.sidecar import index_files
    from streaming.storage import registry
    from streaming.storage.s3 import S3Backend
    from tests.storage import servers
    server = servers.moto_server()
    try:
        os.environ.update({'S3_ENDPOINT_URL': server.url, 'AWS_ACCESS_KEY_ID': 'fake',
                           'AWS_SECRET_ACCESS_KEY': 'fake', 'AWS_DEFAULT_REGION': 'us-east-1'})
        client = boto3.client('s3', endpoint_url=server.url)
        client.create_bucket(Bucket='bench')
        buffer = io.BytesIO()
        pq.write_table(pa.table({'id': list(range(100)), 'text': ['x' * 20] * 100}), buffer)
        body = buffer.getvalue()
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: client.put_object(Bucket='bench', Key=f'pq/f{i:06d}.parquet',
                                                      Body=body), range(files)))
        counts = {'read': 0, 'list': 0, 'bytes': 0}
        # Counted on the backend users get (wrapping its methods: a subclass of S3Backend would
        # not take its boto3-free client, and the figure would be boto3's).
        backend = registry.get_backend('s3://bench/pq')
        assert type(backend) is S3Backend
        read, list_info = backend.read, backend.list_info

        def counted_read(url, start=0, end=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
            counts['read'] += 1
            counts['bytes'] += (end or 0) - start
            return read(url, start, end, **kwargs)

        def counted_list_info(url):  # noqa: ANN001, ANN202
            counts['list'] += 1
            return list_info(url)

        backend.read, backend.list_info = counted_read, counted_list_info
        started = time.perf_counter()
        _, sidecar, changed, _ = index_files('s3://bench/pq', None, {})
        elapsed = time.perf_counter() - started
        first = dict(counts)
        kept = os.path.join(data_dir, 'sidecar.json')
        with open(kept, 'w') as f:
            json.dump(sidecar, f)
        counts.update(read=0, list=0, bytes=0)
        again = time.perf_counter()
        _, _, reindexed, _ = index_files('s3://bench/pq', None, {}, cached=lambda s: kept)
        return {'files': files, 'file_bytes': len(body), 'seconds': elapsed, 'indexed': changed,
                'gets': first['read'], 'list_calls': first['list'],
                'bytes_requested': first['bytes'],
                'recheck_seconds': time.perf_counter() - again, 'recheck_reindexed': reindexed,
                'recheck_gets': counts['read'], 'recheck_list_calls': counts['list']}
    finally:
        server.stop()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == 'worker':
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='datasets 10x smaller, 1 repeat')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--index-files', type=int, default=10_000)
    parser.add_argument('--skip-read', action='store_true')
    parser.add_argument('--decode-once', action='store_true',
                        help='only ours on compressed Parquet: 0 workers, 2 sharing decoded '
                             'units, 2 not sharing (decodes per unit, rate per worker)')
    parser.add_argument('--decode-scale', type=float, default=4.0,
                        help='--decode-once: rows times this (4: 16 units of 50 MB each)')
    parser.add_argument('--remote', action='store_true',
                        help='also the S3 case through the link emulator')
    parser.add_argument('--profile', default='same-region', help='the link profile (--remote)')
    parser.add_argument('--data-dir', default=os.path.join(REPO, 'benchmarks', '.data',
                                                           'formats'))
    args = parser.parse_args()
    scale, repeats = (0.1, 1) if args.quick else (1.0, args.repeats)
    data_dir = os.path.join(args.data_dir, 'quick' if args.quick else 'full')
    os.makedirs(data_dir, exist_ok=True)
    out = os.path.join(REPO, 'benchmarks', 'results', 'formats.json')
    os.makedirs(os.path.dirname(out), exist_ok=True)
    results: dict = {}
    if os.path.exists(out):  # Each part replaces its own section of the last results.
        with open(out) as f:
            results = json.load(f)
    when = {'date': time.strftime('%Y-%m-%d %H:%M'), 'load': os.getloadavg(), 'quick': args.quick}
    if args.decode_once:
        results['decode_once'] = {**when, 'cases': decode_once_cases(
            data_dir, scale * args.decode_scale, repeats)}
    elif not args.skip_read:
        results['read'] = {**when, 'cases': read_cases(data_dir, scale, repeats)}
    if args.remote:
        results['remote'] = {**when, **remote_case(data_dir, scale, repeats, args.profile)}
        print(json.dumps(results['remote']), flush=True)
    if args.index_files:
        results['index'] = {**when, **index_case(args.index_files, data_dir)}
        print(json.dumps(results['index']), flush=True)
    with open(out, 'w') as f:
        json.dump(results, f, indent=1)
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
