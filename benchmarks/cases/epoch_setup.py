"""Case 5: epoch setup at scale: a shuffled dataset over N samples in 50k shards.

The dataset is index-only (its shard files are hard links to one real shard, see prepare.py), so
what is measured is the cost of the index and of computing the epoch's sample order: the time
from building the dataset to its first sample (iterating the dataset itself, no DataLoader), and
the peak RSS of the process. The RSS after imports is reported too, as the baseline.

Params: ``{"path", "batch_size"}``.
"""

from __future__ import annotations

import time
from typing import Any

import harness


def build_dataset(impl: str, path: str, batch_size: int) -> Any:
    module = harness.import_impl(impl)
    dataset_cls, = harness.require(module, 'StreamingDataset')
    if impl == 'litdata':
        return dataset_cls(input_dir=path, shuffle=True)
    return dataset_cls(local=path, batch_size=batch_size, shuffle=True)


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    harness.prepare_impl(impl)  # Not timed.
    harness.set_up_cache(impl, params)  # Not timed: ours' caches removed (cold) or present.
    baseline = harness.current_rss_mb()
    start = time.perf_counter()
    dataset = build_dataset(impl, params['path'], params['batch_size'])
    built = time.perf_counter()
    next(iter(dataset))
    first = time.perf_counter()
    return {
        'first_sample_s': first - start,
        'init_s': built - start,
        'baseline_rss_mb': baseline,
        'peak_rss_mb': harness.peak_rss_mb(),
        'samples': len(dataset),
    }


if __name__ == '__main__':
    harness.main(run)
