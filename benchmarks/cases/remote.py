"""Case 6: one cold epoch streamed from S3 (moto's server on loopback), maybe with a cache limit.

The runner starts the S3 server and uploads each implementation's own copy of the dataset once;
every run streams it into a fresh, empty local cache directory (deleted afterwards) through the
implementation's ``StreamingDataLoader``, reading the whole epoch. The clock starts before the
dataset is built, so the index download counts.

Params: ``{"endpoint", "bucket", "prefix", "scratch", "batch_size", "num_workers", "shuffle",
"cache_limit" (bytes or null), "payload_per_sample"}``, and optionally ``"watch_disk"``: sample
the cache directory's size every 0.2 s (``peak_cache_bytes``). ``start_wall`` is the wall time the
clock started at, for a link emulator's first-request time. ``cpu_s`` leaves out the main
process's CPU in the harness's own ``gc.collect()`` after the epoch (``harness.settle_children``);
``cpu_s_per_gb_with_collect`` keeps it, as figures before 2026-11-28 19:40 UTC did.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from typing import Any

import harness
from read import batch_len

CREDENTIALS = {'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing',
               'AWS_DEFAULT_REGION': 'us-east-1'}


def allow_plain_http_for_litdata() -> None:
    """Let LitData's obstore downloads talk plain http to the loopback server.

    LitData builds its obstore ``S3Store`` from the boto3 client's endpoint but never sets
    ``allow_http``, so every GET to an ``http://`` endpoint fails ("BadScheme"); real S3 is https.
    Adding the option to its client options is the smallest change that keeps its own fast path.
    """
    from litdata.streaming import downloader
    options = getattr(downloader, '_OBSTORE_CLIENT_OPTIONS', None)
    if isinstance(options, dict):
        options['allow_http'] = 'true'


def make_loader(impl: str, params: dict[str, Any], local: str) -> Any:
    module = harness.import_impl(impl)
    dataset_cls, loader_cls = harness.require(module, 'StreamingDataset', 'StreamingDataLoader')
    remote = f's3://{params["bucket"]}/{params["prefix"]}'
    limit = params['cache_limit']
    if impl == 'litdata':
        allow_plain_http_for_litdata()
        options = {'endpoint_url': params['endpoint']}
        dataset = dataset_cls(input_dir=remote, cache_dir=local, shuffle=params['shuffle'],
                              max_cache_size=limit if limit else '1TB', storage_options=options,
                              transform=harness.litdata_bytes)
    else:
        dataset = dataset_cls(remote=remote, local=local, batch_size=params['batch_size'],
                              shuffle=params['shuffle'], cache_limit=limit)
    return loader_cls(dataset, batch_size=params['batch_size'],
                      num_workers=params['num_workers'])


def cache_bytes(directory: str) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


class DiskWatch:
    """The largest size a directory reached, sampled in a thread every ``interval`` seconds."""

    def __init__(self, directory: str, interval: float = 0.2) -> None:
        self.directory, self.interval, self.peak = directory, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, cache_bytes(self.directory))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, cache_bytes(self.directory))


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    os.environ.update(CREDENTIALS)
    os.environ['S3_ENDPOINT_URL'] = params['endpoint']  # The reference's endpoint override.
    harness.prepare_impl(impl)  # Not timed.
    os.makedirs(params['scratch'], exist_ok=True)
    local = tempfile.mkdtemp(prefix=f'{impl}-cache-', dir=params['scratch'])
    watch = DiskWatch(local) if params.get('watch_disk') else None
    try:
        cpu = harness.job_cpu_s()
        start_wall = time.time()
        start = time.perf_counter()
        loader = make_loader(impl, params, local)
        iterator = iter(loader)
        samples = batch_len(next(iterator))
        first = time.perf_counter()
        for batch in iterator:
            samples += batch_len(batch)
        end = time.perf_counter()
        del iterator, loader
        collection = harness.settle_children()
        cpu_with_collection = harness.job_cpu_s() - cpu
        cpu = cpu_with_collection - collection  # The harness's gc.collect() is not the job's.
        left_in_cache = cache_bytes(local)
        peak = watch.stop() if watch is not None else None
    finally:
        shutil.rmtree(local, ignore_errors=True)
    epoch = end - start
    return {
        'epoch_s': epoch,
        'first_batch_s': first - start,
        'samples': samples,
        'samples_per_s': samples / epoch,
        'mb_per_s': samples * params['payload_per_sample'] / epoch / 1e6,
        'cpu_s': cpu,
        'cpu_s_per_gb': harness.cpu_per_gb(cpu, samples * params['payload_per_sample']),
        'cpu_s_per_gb_with_collect': harness.cpu_per_gb(cpu_with_collection,
                                                        samples * params['payload_per_sample']),
        'cache_bytes_at_end': left_in_cache,
        **({'peak_cache_bytes': peak} if peak is not None else {}),
        'start_wall': start_wall,
        'peak_rss_mb': harness.peak_rss_mb(children=True),
    }


if __name__ == '__main__':
    harness.main(run)
