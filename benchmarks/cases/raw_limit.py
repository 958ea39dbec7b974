"""Case 7: the machine's limit on the same files, for scale.

* ``read_mb_per_s``: read every shard file of the dataset (ours' MDS copy) straight into memory,
  page cache warm (a first, untimed pass warms it), into a reused buffer: no parsing at all.
  Passes repeat for at least ``min_seconds`` (and 3 passes); the median pass is reported.
* ``floor_ns_per_sample``: a bare Python loop that slices each sample's bytes out of the shard in
  memory, with the offsets precomputed as a list: the least any Python-level reader that returns
  each sample as its own ``bytes`` can cost per sample.

Params: ``{"path", "min_seconds"}``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import harness
import numpy as np


def shard_paths(path: str) -> list[str]:
    with open(os.path.join(path, 'index.json')) as f:
        index = json.load(f)
    return [os.path.join(path, shard['raw_data']['basename']) for shard in index['shards']]


def read_all(paths: list[str], buffer: bytearray) -> int:
    total = 0
    view = memoryview(buffer)
    for p in paths:
        with open(p, 'rb', buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            got = 0
            while got < size:
                n = f.readinto(view[got:size])
                if not n:
                    break
                got += n
            total += got
    return total


def slice_floor(data: bytes) -> tuple[int, float]:
    """(samples, seconds) to slice every sample of one in-memory MDS shard."""
    count = int(np.frombuffer(data, np.uint32, 1)[0])
    offsets = np.frombuffer(data, np.uint32, count + 1, 4).tolist()
    begin = time.perf_counter()
    for i in range(count):
        data[offsets[i]:offsets[i + 1]]
    return count, time.perf_counter() - begin


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    paths = shard_paths(params['path'])
    largest = max(os.path.getsize(p) for p in paths)
    buffer = bytearray(largest)
    read_all(paths, buffer)  # Warm the page cache (and the buffer's pages).
    rates = []
    began = time.perf_counter()
    while len(rates) < 3 or time.perf_counter() - began < params.get('min_seconds', 1.0):
        with harness.Stopwatch() as sw:
            total = read_all(paths, buffer)
        rates.append(total / sw.seconds / 1e6)
    samples, seconds, payload = 0, 0.0, 0
    for p in paths:
        with open(p, 'rb') as f:
            data = f.read()
        count, took = slice_floor(data)
        samples += count
        seconds += took
        payload += len(data)
    return {
        'read_mb_per_s': float(np.median(rates)),
        'read_passes': len(rates),
        'floor_ns_per_sample': seconds / samples * 1e9,
        'floor_samples_per_s': samples / seconds,
        'floor_mb_per_s': payload / seconds / 1e6,
        'bytes': total,
    }


if __name__ == '__main__':
    harness.main(run)
