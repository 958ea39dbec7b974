"""Where DataLoader-worker time goes for one dataset: read, decode, collate, transfer.

``python -m benchmarks.loader_breakdown PATH [--batch-size 32] [--workers 2] [--epochs 4]``

1. Per batch, on one core, medians over shuffled batches of PATH (an MDS dataset of ours):
   torch's per-sample fetch (``STREAMING_BATCH_FETCH=0``): read (each sample's bytes out of
   the shard), decode (``decode_sample``), collate (``default_collate``); our batch fetch:
   gather (read and decode of the batch's columns at once) and collate, or, in a worker with
   the default collate, gather as spans and pack into the shared-memory ring.
2. Transfer, between two real processes: a producer process puts batches built as a worker
   builds them into a torch queue, the main process takes them; CPU time per batch on each
   side (producer: pickling and the queue's feeder thread; main: pipe and unpickling, which
   for the ring means copying the batch out of shared memory).
3. End to end: a plain ``torch.utils.data.DataLoader`` and a ``StreamingDataLoader`` with
   ``--workers`` workers, default collate, shuffled, for ``--epochs`` epochs, with the batches
   pickled (``STREAMING_BATCH_SHM=0``) and through the ring: MB/s, and CPU per batch of the main
   process and of the workers (workers are reaped at each epoch's end, so their CPU includes
   starting up).

CPU times rather than wall times where possible: the machine may be shared. Runs on our
implementation only; not part of the benchmark suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, default_collate

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset import handoff
from streaming.dataset.batches import SampleStream, _collate_columns


def _stream(dataset: StreamingDataset, seed: int) -> SampleStream:
    ids = np.random.default_rng(seed).permutation(dataset.num_samples)
    return SampleStream(ids, dataset.sample_offset_per_shard, dataset.cache, dataset.get_item,
                        True, None)


def _median_ms(step: Callable[[Any], Any], inputs: list) -> float:
    times = []
    for item in inputs:
        started = time.perf_counter()
        step(item)
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def components(path: str, batch_size: int, batches: int = 60) -> dict[str, float]:
    dataset = StreamingDataset(local=path, batch_size=batch_size, shuffle=True)
    stream = _stream(dataset, 0)
    picks = [stream.take(batch_size) for _ in range(batches)]
    cache = dataset.cache
    for shards, indices in picks:  # Warm: every shard mapped, as in a worker after a while.
        stream.gather(shards, indices)

    def raw(pick: tuple) -> list:
        return [cache.ready(s).get_sample_data(i)
                for s, i in zip(pick[0].tolist(), pick[1].tolist())]

    raws = [raw(pick) for pick in picks]
    reader = cache.ready(int(picks[0][0][0]))
    samples = [[reader.decode_sample(data) for data in batch] for batch in raws]
    runs = [stream.gather(*pick) for pick in picks]
    return {
        'per-sample read': _median_ms(raw, picks),
        'per-sample decode': _median_ms(lambda b: [reader.decode_sample(d) for d in b], raws),
        'per-sample default_collate': _median_ms(default_collate, samples),
        'batch gather (read + decode)': _median_ms(lambda p: stream.gather(*p), picks),
        'batch collate': _median_ms(_collate_columns, runs),
        'ring: gather as spans': _median_ms(lambda p: stream.gather(*p, spans=True), picks),
        'ring: pack (copy into the ring)': _median_ms(
            lambda p: handoff.pack(stream.gather(*p, spans=True), False), picks),
    }


def _produce(path: str, batch_size: int, ring: bool, queue: Any, done: Any) -> None:
    dataset = StreamingDataset(local=path, batch_size=batch_size, shuffle=True)
    stream = _stream(dataset, 1)
    cpu = time.process_time()
    count = 0
    while True:
        pick = stream.take(batch_size)
        if len(pick[0]) < batch_size:
            break
        runs = stream.gather(*pick, spans=ring)
        queue.put(handoff.pack(runs, False) if ring else _collate_columns(runs))
        count += 1
    queue.put(None)
    done.wait()  # The queue's feeder thread and the fd sharer must outlive the last get.
    queue.put((time.process_time() - cpu) / count)


def transfer(path: str, batch_size: int, ring: bool) -> dict[str, float]:
    context = mp.get_context('fork')
    queue, done = context.Queue(), context.Event()
    producer = context.Process(target=_produce, args=(path, batch_size, ring, queue, done))
    producer.start()
    cpu, count = None, 0
    while True:
        batch = queue.get()
        if cpu is None:
            cpu = time.process_time()  # From the first batch on.
            continue
        if batch is None:
            break
        count += 1
        del batch
    main_ms = 1e3 * (time.process_time() - cpu) / count
    done.set()
    producer_ms = 1e3 * queue.get()
    producer.join()
    handoff.release_dead_workers()
    return {'producer_cpu_ms': producer_ms, 'main_cpu_ms': main_ms}


def _payload(batch: dict) -> int:
    return sum(sum(map(len, v)) if isinstance(v, list) else v.numel() * v.element_size()
               for v in batch.values())


def end_to_end(path: str, batch_size: int, workers: int, epochs: int, loader_cls: type,
               ring: bool) -> dict[str, float]:
    os.environ['STREAMING_BATCH_SHM'] = '1' if ring else '0'
    dataset = StreamingDataset(local=path, batch_size=batch_size, shuffle=True)
    loader = loader_cls(dataset, batch_size=batch_size, num_workers=workers)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    count, nbytes = 0, 0
    for _ in range(epochs):
        for batch in loader:
            count += 1
            nbytes += _payload(batch)
    elapsed = time.perf_counter() - started
    children2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own2 = resource.getrusage(resource.RUSAGE_SELF)
    os.environ.pop('STREAMING_BATCH_SHM')

    def cpu(a: Any, b: Any) -> float:
        return 1e3 * (b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime) / count

    return {'mb_per_s': nbytes / elapsed / 1e6, 'main_cpu_ms': cpu(own, own2),
            'workers_cpu_ms': cpu(children, children2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('path')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=4)
    args = parser.parse_args()
    print(f'load average before: {os.getloadavg()}')
    print('\n| step (one core, per batch) | ms |\n|---|---|')
    for name, value in components(args.path, args.batch_size).items():
        print(f'| {name} | {value:.3f} |')
    print('\n| transfer between processes (CPU per batch) | producer ms (build + put) | '
          'main ms (get) |\n|---|---|---|')
    for ring in (False, True):
        got = transfer(args.path, args.batch_size, ring)
        label = 'ring descriptor (handoff.pack)' if ring else 'pickled batch (torch default)'
        print(f'| {label} | {got["producer_cpu_ms"]:.3f} | {got["main_cpu_ms"]:.3f} |')
    print(f'\n| loader, {args.workers} workers | transfer | MB/s | main CPU ms/batch | '
          f'workers CPU ms/batch |\n|---|---|---|---|---|')
    for loader_cls in (DataLoader, StreamingDataLoader):
        for ring in (False, True):
            got = end_to_end(args.path, args.batch_size, args.workers, args.epochs, loader_cls,
                             ring)
            print(f'| {loader_cls.__name__} | {"ring" if ring else "pickled"} | '
                  f'{got["mb_per_s"]:.0f} | {got["main_cpu_ms"]:.2f} | '
                  f'{got["workers_cpu_ms"]:.2f} |')
    print(f'\nload average after: {os.getloadavg()}')


if __name__ == '__main__':
    main()
