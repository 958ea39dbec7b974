"""Where DataLoader-worker time goes for one dataset: read, collate, transfer (issue 13 item 3).

``python -m benchmarks.loader_breakdown PATH [--batch-size 32] [--workers 2] [--seconds 3]``
prints, per batch: the worker's read+decode and collate time (``StreamingDataLoader.stats``),
the cost of moving the batch between processes (torch's pickler: dumps in the worker, loads in
the main process, on a batch read here), and the throughput with 0 and with ``--workers``
workers. Runs on our implementation only; numbers are medians of batches, not a benchmark run.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from multiprocessing.reduction import ForkingPickler

import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

from streaming import StreamingDataLoader, StreamingDataset


def _payload(batch: dict) -> int:
    total = 0
    for value in batch.values():
        if isinstance(value, list):
            total += sum(len(v) for v in value)
        else:
            total += value.numel() * value.element_size()
    return total


def _throughput(path: str, batch_size: int, workers: int, seconds: float) -> dict:
    dataset = StreamingDataset(local=path, batch_size=batch_size, shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
    start, samples, nbytes = None, 0, 0
    while start is None or time.perf_counter() - start < seconds:
        for batch in loader:
            if start is None:
                start = time.perf_counter()
                loader.stats.reset()
                continue
            samples += len(batch['label'] if 'label' in batch else next(iter(batch.values())))
            nbytes += _payload(batch)
            if time.perf_counter() - start > seconds:
                break
    elapsed = time.perf_counter() - start
    stats = loader.stats.summary()
    rows = stats['workers']
    batches = max(sum(r['batches'] for r in rows), 1)
    return {'samples_per_s': samples / elapsed, 'mb_per_s': nbytes / elapsed / 1e6,
            'read_ms_per_batch': 1e3 * sum(r['read_s'] for r in rows) / batches,
            'wait_ms_per_step': 1e3 * stats['mean_wait_s'],
            'stall_fraction': stats['stall_fraction']}


def _transfer(path: str, batch_size: int) -> dict:
    dataset = StreamingDataset(local=path, batch_size=batch_size)
    batches = [b for _, b in zip(range(20), StreamingDataLoader(dataset, batch_size=batch_size))]
    dumps, loads = [], []
    for batch in batches:
        started = time.perf_counter()
        buffer = io.BytesIO()
        ForkingPickler(buffer).dump(batch)
        data = buffer.getbuffer()
        middle = time.perf_counter()
        ForkingPickler.loads(data)
        loads.append(time.perf_counter() - middle)
        dumps.append(middle - started)
    return {'pickle_ms_per_batch': 1e3 * statistics.median(dumps),
            'unpickle_ms_per_batch': 1e3 * statistics.median(loads),
            'batch_mb': _payload(batches[0]) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('path')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--seconds', type=float, default=3.0)
    args = parser.parse_args()
    print('transfer', _transfer(args.path, args.batch_size))
    for workers in (0, args.workers):
        print(f'{workers} workers', _throughput(args.path, args.batch_size, workers, args.seconds))


if __name__ == '__main__':
    main()
