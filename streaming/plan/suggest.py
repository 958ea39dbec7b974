"""Advice: the cheapest settings that meet a target throughput, and the smallest safe cache.

``suggest`` walks one setting at a time (``cache_limit``, ``predownload``, DataLoader workers,
and the shard size of a re-write), each over a few values around the run's, keeping every
change that makes the run meet its target more cheaply: cost first (egress and GETs), then the
disk the cache takes, then fewer workers. Each candidate is a full plan (same engine, same
model), so its reasons are the plan's own figures.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from streaming.plan.core import make_plan
from streaming.plan.inputs import DatasetShape, RunSettings
from streaming.plan.profiles import LinkProfile

__all__ = ['reshard', 'smallest_cache_without_refetch', 'suggest']


def _node_bytes(shape: DatasetShape, run: RunSettings) -> int:
    return int(shape.held_bytes.sum() / run.nodes)


def smallest_cache_without_refetch(shape: DatasetShape, run: RunSettings, profile: LinkProfile,
                                   working_set: int, tries: int = 6, **options: Any
                                   ) -> int | None:
    """The smallest ``cache_limit`` (within ~5%) whose plan downloads no shard twice.

    Bisects between the working set and the whole dataset; None if even the whole dataset
    refetches (it cannot: then the limit is the dataset).
    """
    largest = int(shape.held_bytes.max())
    low = max(working_set, 2 * largest + shape.index_bytes)
    high = int(shape.held_bytes.sum()) + shape.index_bytes + largest

    def clean(limit: int) -> bool:
        plan = make_plan(shape, replace(run, cache_limit=limit), profile, quality=False,
                         **options)
        return not any(node['refetches'] for node in plan['nodes'])
    if clean(low):
        return low
    for _ in range(tries):
        if high - low <= 0.05 * high:
            break
        middle = (low + high) // 2
        if clean(middle):
            high = middle
        else:
            low = middle
    return high


def reshard(shape: DatasetShape, factor: float) -> DatasetShape:
    """The dataset written again with shards ``factor`` times as big (same samples, bytes)."""
    per_sample = shape.held_bytes.sum() / shape.total_samples
    ratio = shape.held_bytes.sum() / max(1, shape.fetch_bytes.sum())
    samples = max(1, int(round(float(np.mean(shape.samples)) * factor)))
    return DatasetShape.synthetic(shape.total_samples, samples, max(1, int(per_sample)),
                                  compression_ratio=max(1.0, float(ratio)))


def _key(plan: dict[str, Any], run: RunSettings) -> tuple:
    disk = run.cache_bytes if run.cache_bytes is not None else \
        plan['nodes'][0]['peak_cache_bytes']
    return (round(plan['totals']['cost'], 6), disk, run.workers)


def _rate(plan: dict[str, Any]) -> float:
    return min(node['samples_per_s'] for node in plan['nodes'])


def suggest(shape: DatasetShape, run: RunSettings, profile: LinkProfile,
            target_samples_per_s: float | None = None, **options: Any) -> dict[str, Any]:
    """The cheapest settings found that reach ``target_samples_per_s`` per node, and why.

    The target defaults to the model's own pace (``steps_per_s`` / ``samples_per_s``), or, if
    the run gives none, 95% of the throughput of the run as given.
    """
    base = make_plan(shape, run, profile, quality=False, **options)
    if target_samples_per_s is None:
        pace = run.step_seconds
        target_samples_per_s = (run.batch_size * run.ranks_per_node / pace * 0.98) if pace \
            else 0.95 * _rate(base)
    best_run, best_shape, best = run, shape, base
    why = [f'target: {target_samples_per_s:.0f} samples/s per node; as given: '
           f'{_rate(base):.0f} samples/s, cost {base["totals"]["cost"]:.4f}']
    node_bytes = _node_bytes(shape, run)
    candidates: list[tuple[str, list[Any]]] = [
        ('cache_limit', [None] + [int(node_bytes * f) for f in (0.1, 0.25, 0.5, 0.75)]),
        ('predownload', [None, 8 * run.batch_size, 32 * run.batch_size]),
        ('workers', [1, 2, 4, 8]),
        ('shard size', [0.5, 2.0, 4.0]),
    ]
    for name, values in candidates:
        for value in values:
            if name == 'shard size':
                trial_shape, trial_run = reshard(best_shape, value), best_run
            else:
                if getattr(best_run, name) == value:
                    continue
                trial_shape = best_shape
                try:
                    trial_run = replace(best_run, **{name: value})
                except ValueError:
                    continue
            if trial_run.cache_bytes is not None and trial_run.cache_bytes < \
                    2 * int(trial_shape.held_bytes.max()) + trial_shape.index_bytes:
                continue
            plan = make_plan(trial_shape, trial_run, profile, quality=False, **options)
            meets = _rate(plan) >= target_samples_per_s
            best_meets = _rate(best) >= target_samples_per_s
            better = (meets and (not best_meets or _key(plan, trial_run) < _key(best, best_run))) \
                or (not meets and not best_meets and _rate(plan) > _rate(best))
            if better:
                label = f'{value}x shards' if name == 'shard size' else f'{name}={value}'
                why.append(f'{label}: {_rate(plan):.0f} samples/s, cost '
                           f'{plan["totals"]["cost"]:.4f}, {plan["nodes"][0]["refetches"]} '
                           f'refetches, first batch {plan["nodes"][0]["first_batch_s"]:.2f} s '
                           f'(was {_rate(best):.0f} samples/s, cost '
                           f'{best["totals"]["cost"]:.4f})')
                best_run, best_shape, best = trial_run, trial_shape, plan
    meets = _rate(best) >= target_samples_per_s
    why.append(('meets the target' if meets else 'no setting tried meets the target; the '
                'fastest found') + f': {_rate(best):.0f} samples/s at cost '
               f'{best["totals"]["cost"]:.4f}')
    settings = {name: getattr(best_run, name) for name in ('cache_limit', 'predownload',
                                                          'workers')}
    resharded = best_shape is not shape
    if resharded:
        settings['shard_samples'] = int(np.mean(best_shape.samples))
    return {'settings': settings, 'meets_target': meets,
            'target_samples_per_s': target_samples_per_s, 'reshard': resharded,
            'samples_per_s': _rate(best), 'cost': best['totals']['cost'], 'why': why}
