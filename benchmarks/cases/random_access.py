"""Case 3: random access latency of ``ds[i]`` (median and p99), page cache warm.

``api`` picks the dataset class: ``local`` is ``LocalDataset`` (ours and the reference; LitData
has none), ``streaming`` is ``StreamingDataset`` over a local directory (all three). Indices are
drawn uniformly with a fixed seed; a warm-up of ``warmup`` accesses (opening every shard) is not
counted, then each of ``count`` calls is timed on its own.

Params: ``{"path", "api", "count", "warmup", "seed"}``.
"""

from __future__ import annotations

import time
from typing import Any

import harness
import numpy as np


def open_dataset(impl: str, path: str, api: str) -> Any:
    module = harness.import_impl(impl)
    if impl == 'litdata':
        if api == 'local':
            raise harness.Unsupported('LitData has no LocalDataset (see the streaming row)')
        dataset_cls, = harness.require(module, 'StreamingDataset')
        return dataset_cls(input_dir=path, transform=harness.litdata_bytes)
    if api == 'local':
        dataset_cls, = harness.require(module, 'LocalDataset')
        return dataset_cls(local=path)
    dataset_cls, = harness.require(module, 'StreamingDataset')
    return dataset_cls(local=path)


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    harness.prepare_impl(impl)
    dataset = open_dataset(impl, params['path'], params['api'])
    size = len(dataset)
    rng = np.random.default_rng(params['seed'])
    for i in rng.integers(0, size, params['warmup']).tolist():
        dataset[i]
    indices = rng.integers(0, size, params['count']).tolist()
    timings = np.empty(len(indices), np.int64)
    clock = time.perf_counter_ns
    for k, i in enumerate(indices):
        begin = clock()
        dataset[i]
        timings[k] = clock() - begin
    micros = timings / 1e3
    return {
        'median_us': float(np.median(micros)),
        'p99_us': float(np.percentile(micros, 99)),
        'mean_us': float(micros.mean()),
        'count': len(indices),
    }


if __name__ == '__main__':
    harness.main(run)
