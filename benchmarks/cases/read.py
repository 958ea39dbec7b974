"""Case 2: local read throughput through a torch DataLoader, and time to first batch.

Every implementation reads its own copy of the dataset from local disk (page cache warm after
the first run) with its ``StreamingDataset`` and ``StreamingDataLoader`` and the default collate
(LitData with a transform that turns its memoryviews into bytes, see ``harness.litdata_bytes``).
The clock starts (after imports) before the dataset is built, so ``first_batch_s`` includes
index loading, epoch setup and DataLoader worker start. Throughput counts the samples after the
first batch over the time after it: to the end of the epoch, or of a later one if the first took
less than ``min_seconds``, or to ``max_seconds``.

Params: ``{"path", "batch_size", "num_workers", "shuffle", "min_seconds", "max_seconds",
"payload_per_sample"}``, optional ``"plain"`` (a bare torch DataLoader).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import harness


def batch_len(batch: Any) -> int:
    """Samples in a collated batch (a dict of columns, or a sequence)."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    return len(batch)


def make_loader(impl: str, path: str, batch_size: int, num_workers: int, shuffle: bool,
                plain: bool = False, **dataset_kwargs: Any) -> Iterable[Any]:
    """The implementation's streaming DataLoader over a local dataset directory.

    ``plain``: a bare ``torch.utils.data.DataLoader`` instead, as users write it.
    """
    module = harness.import_impl(impl)
    dataset_cls, loader_cls = harness.require(module, 'StreamingDataset', 'StreamingDataLoader')
    if plain:
        from torch.utils.data import DataLoader
        loader_cls = DataLoader
    if impl == 'litdata':
        dataset = dataset_cls(input_dir=path, shuffle=shuffle, transform=harness.litdata_bytes,
                              **dataset_kwargs)
    else:
        dataset = dataset_cls(local=path, batch_size=batch_size, shuffle=shuffle,
                              **dataset_kwargs)
    return loader_cls(dataset, batch_size=batch_size, num_workers=num_workers)


def measure(loader: Iterable[Any], start: float, min_seconds: float,
            max_seconds: float) -> dict[str, Any]:
    """Iterate ``loader``; ``start`` is when building it began.

    Reads on past the end of the epoch (starting the next one, as training does) until
    ``min_seconds`` have passed since the first batch, so a small dataset read in a blink is
    still timed over a useful interval; stops at the first batch after ``max_seconds``.
    """
    iterator = iter(loader)
    first = next(iterator)
    first_at = time.perf_counter()
    samples = batch_len(first)
    after_first = 0
    epochs = 1
    stopped_by = 'end of epoch'
    while True:
        for batch in iterator:
            after_first += batch_len(batch)
            if time.perf_counter() >= first_at + max_seconds:
                stopped_by = 'max_seconds'
                break
        else:
            if time.perf_counter() < first_at + min_seconds:
                epochs += 1
                iterator = iter(loader)
                continue
        break
    end = time.perf_counter()
    del iterator
    elapsed = end - first_at
    return {
        'first_batch_s': first_at - start,
        'samples': samples + after_first,
        'epochs': epochs,
        'read_s': elapsed,
        'samples_per_s': after_first / elapsed if elapsed > 0 else float('nan'),
        'stopped_by': stopped_by,
    }


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    harness.prepare_impl(impl)  # Not timed.
    cpu = harness.job_cpu_s()
    start = time.perf_counter()
    loader = make_loader(impl, params['path'], params['batch_size'], params['num_workers'],
                         params['shuffle'], params.get('plain', False))
    metrics = measure(loader, start, params['min_seconds'], params['max_seconds'])
    del loader
    harness.settle_children()
    metrics['cpu_s'] = harness.job_cpu_s() - cpu
    metrics['cpu_s_per_gb'] = harness.cpu_per_gb(
        metrics['cpu_s'], metrics['samples'] * params['payload_per_sample'])
    metrics['mb_per_s'] = metrics['samples_per_s'] * params['payload_per_sample'] / 1e6
    metrics['peak_rss_mb'] = harness.peak_rss_mb(children=True)
    return metrics


if __name__ == '__main__':
    harness.main(run)
