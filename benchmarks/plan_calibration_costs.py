"""This machine's costs for ``benchmarks.plan_calibration``: what the plan is given besides the
settings, measured from epochs over an uncapped link of the same shape as the compared ones.

Over the uncapped link (no latency, no rate cap) the data arrives at once, so the first batch is
the start-up (building the dataset, starting the DataLoader workers) and the rest of the epoch
is mostly the workers reading. The calibration runs one uncapped epoch before each compared
epoch, with the same workers and cache settings, so that both see the same load on this shared
machine; the costs of a row come from its own uncapped epochs (medians).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Config:
    name: str
    profile: str
    cache_fraction: float | None = None
    nodes: int = 1
    request_limit: float | None = None


def log(message: str) -> None:
    print(f'[plan-calibration] {message}', file=sys.stderr, flush=True)


def ok_metrics(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r['metrics'] for r in runs if r['status'] == 'ok']


def measured(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of the runs that finished (refetches from the fleet's logs when it has them,
    else the bytes fetched beyond the dataset's)."""
    ok = ok_metrics(runs)
    if not ok:
        return {'status': runs[0].get('reason', runs[0]['status']) if runs else 'not run'}
    out: dict[str, Any] = {'status': 'ok', 'n': len(ok)}
    for name in ('first_batch_s', 'epoch_s', 'fetched_ratio'):
        out[name] = statistics.median(m[name] for m in ok)
    if all('refetched_share' in m for m in ok):
        out['refetched_share'] = statistics.median(m['refetched_share'] for m in ok)
    else:
        out['refetched_share'] = max(0.0, out['fetched_ratio'] - 1.0)
    return out


def machine_costs(runs: list[dict[str, Any]], samples: int, workers: int) -> dict[str, float]:
    """Start-up and an upper bound of the reading cost, from epochs over the uncapped link.

    The reading cost per sample per worker taken as all of the epoch after the first batch is
    an upper bound (``fit_reading_cost`` takes the store's own time out of it).
    """
    ok = ok_metrics(runs)
    if not ok:
        raise RuntimeError(f'the uncapped epochs failed: {runs[0] if runs else None}')
    rest = statistics.median(m['epoch_s'] - m['first_batch_s'] for m in ok)
    return {'build_s': statistics.median(m['build_s'] for m in ok),
            'startup_s': statistics.median(m['first_batch_s'] for m in ok),
            'decode_s_per_sample': rest * workers / samples,
            'uncapped_epoch_s': statistics.median(m['epoch_s'] for m in ok),
            'uncapped_runs': len(ok)}


def fit_reading_cost(epoch_of: Callable[[float], float], target: float, upper: float
                     ) -> float:
    """The reading cost per sample per worker that makes the plan of the uncapped epochs (over
    the link as they saw it: ``epoch_of(cost)``) last as long as they did (``target``).

    The uncapped link is not instant: the store takes time to serve an epoch too, and a cost
    taken as all of the epoch after the first batch (``upper``) would count that time twice
    once a capped link also carries it. Bisection between nothing and that upper bound.
    """
    low, high = 0.0, upper
    for _ in range(10):
        middle = (low + high) / 2
        if epoch_of(middle) > target:
            high = middle
        else:
            low = middle
    return (low + high) / 2


def describe(machine: dict[str, Any]) -> str:
    """A row's machine costs in a few words (for the docs)."""
    rate = machine.get('uncapped_link', {}).get('store_rate')
    store = f', the store began {rate:.0f} answers/s' if rate else ''
    if 'start_spread_s' in machine:
        store += (f', the nodes began within {machine["start_spread_s"]:.2f} s, a node\'s GETs '
                  f'{machine["send_gap_s"] * 1e3:.1f} ms apart')
    return (f'start-up {machine["startup_s"]:.2f} s, build {machine["build_s"]:.2f} s, '
            f'reading {machine["decode_s_per_sample"] * 1e3:.2f} ms per sample per worker'
            f'{store} (uncapped epoch {machine["uncapped_epoch_s"]:.2f} s, '
            f'{machine["uncapped_runs"]} runs)')
