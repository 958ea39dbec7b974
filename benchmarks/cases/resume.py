"""Case 4: resumption: time to the first batch after ``load_state_dict`` at a point in an epoch.

A fresh process builds the dataset and ``StreamingDataLoader``, loads a checkpoint taken
``fraction`` of the way through epoch 0, and takes the first batch; the clock covers all of it.
The checkpoint is the one the implementation's own loader would have saved after yielding that
many samples (its documented ``state_dict`` layout), built directly so that no run has to read
half an epoch first. ``first_id`` is reported so a run that silently restarted from the
beginning shows up (with ``shuffle`` off it must be ``fraction * samples``).

Params: ``{"path", "batch_size", "num_workers", "shuffle", "fraction"}``.
"""

from __future__ import annotations

import time
from typing import Any

import harness
from read import make_loader

REFERENCE_SEED = 9176  # The reference's default shuffle_seed.


def checkpoint(impl: str, loader: Any, samples: int, fraction: float, batch_size: int,
               num_workers: int) -> dict[str, Any]:
    """The state ``loader`` would save after yielding ``fraction`` of an epoch of ``samples``."""
    step = batch_size * max(num_workers, 1)
    yielded = int(samples * fraction) // step * step
    if impl == 'litdata':
        dataset_state = loader.dataset.state_dict(yielded, num_workers, batch_size)
        return {'dataset': dataset_state, 'current_epoch': 1, 'num_samples_yielded': yielded,
                'latest_worker_idx': (yielded // batch_size - 1) % max(num_workers, 1)}
    return {'epoch': 0, 'sample_in_epoch': yielded, 'num_canonical_nodes': 1,
            'shuffle_seed': REFERENCE_SEED, 'initial_physical_nodes': 1}


def first_id(batch: Any) -> int | None:
    if isinstance(batch, dict) and 'id' in batch:
        return int(batch['id'][0])
    return None


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    harness.prepare_impl(impl)  # Not timed.
    harness.set_up_cache(impl, params)  # Not timed: ours' caches removed (cold) or present.
    start = time.perf_counter()
    loader: Any = make_loader(impl, params['path'], params['batch_size'], params['num_workers'],
                              params['shuffle'])
    samples = len(loader.dataset)
    state = checkpoint(impl, loader, samples, params['fraction'], params['batch_size'],
                       params['num_workers'])
    loader.load_state_dict(state)
    iterator = iter(loader)
    batch = next(iterator)
    first = time.perf_counter()
    del iterator
    return {
        'first_batch_s': first - start,
        'resumed_at': state.get('sample_in_epoch', state.get('num_samples_yielded')),
        'first_id': first_id(batch),
        'samples': samples,
        'peak_rss_mb': harness.peak_rss_mb(children=True),
    }


if __name__ == '__main__':
    harness.main(run)
