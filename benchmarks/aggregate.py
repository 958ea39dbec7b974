"""Turning runs into numbers: medians, min-max, ratios ours/reference, and targets met or not.

Pure functions over plain dicts, so they are easy to test on synthetic runs.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterator
from typing import Any

from benchmarks.config import LITDATA, OURS, REFERENCE, Case, Target


def impl_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Status and per-metric {median, min, max, n} of one implementation's runs of a case.

    Any successful run makes the status ``ok``; otherwise the first failure's status and reason.
    """
    ok = [run['metrics'] for run in runs if run.get('status') == 'ok']
    if not ok:
        if not runs:
            return {'status': 'not run', 'reason': 'not run', 'stats': {}}
        first = runs[0]
        return {'status': first.get('status', 'error'), 'reason': first.get('reason', ''),
                'stats': {}}
    stats = {}
    for key in ok[0]:
        values = [m[key] for m in ok if isinstance(m.get(key), (int, float))
                  and not isinstance(m.get(key), bool)]
        if values:
            stats[key] = {'median': statistics.median(values), 'min': min(values),
                          'max': max(values), 'n': len(values)}
    return {'status': 'ok', 'stats': stats}


def median(summary: dict[str, Any], metric: str) -> float | None:
    stat = summary.get('stats', {}).get(metric)
    return None if stat is None else stat['median']


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def evaluate_target(target: Target, summaries: dict[str, dict[str, Any]],
                    all_cases: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """{'ratio', 'met' (True/False/None), 'why'} of one target of a case."""
    ours = summaries.get(OURS, {})
    if isinstance(target.baseline, tuple):
        case_id, metric = target.baseline
        baseline = next(iter(all_cases.get(case_id, {}).values()), {})
        base_value = median(baseline, metric)
        base_name = f'{case_id} {metric}'
    else:
        baseline = summaries.get(target.baseline, {})
        base_value = median(baseline, target.metric)
        base_name = target.baseline
    value = ratio(median(ours, target.metric), base_value)
    if ours.get('status') != 'ok':
        return {'ratio': None, 'met': None, 'why': f'ours {ours.get("status", "not run")}'}
    if value is None:
        return {'ratio': None, 'met': None, 'why': f'no {base_name} result'}
    return {'ratio': value, 'met': target.met(value), 'why': ''}


def summarise(cases: list[Case], runs: dict[str, dict[str, list[dict[str, Any]]]]
              ) -> list[dict[str, Any]]:
    """One record per case: per-implementation summaries, ratios per metric, targets."""
    summaries = {case.id: {impl: impl_summary(runs.get(case.id, {}).get(impl, []))
                           for impl in case.impls} for case in cases}
    records = []
    for case in cases:
        per_impl = summaries[case.id]
        ratios = {}
        for metric in case.metrics:
            ratios[metric.key] = {
                'ours/reference': ratio(median(per_impl.get(OURS, {}), metric.key),
                                        median(per_impl.get(REFERENCE, {}), metric.key)),
                'litdata/reference': ratio(median(per_impl.get(LITDATA, {}), metric.key),
                                           median(per_impl.get(REFERENCE, {}), metric.key)),
            }
        targets = [{'metric': t.metric, 'text': t.text,
                    **evaluate_target(t, per_impl, summaries)} for t in case.targets]
        records.append({'id': case.id, 'group': case.group, 'title': case.title,
                        'impls': list(case.impls),
                        'metrics': [{'key': m.key, 'label': m.label, 'unit': m.unit,
                                     'higher_is_better': m.higher_is_better}
                                    for m in case.metrics],
                        'results': per_impl, 'ratios': ratios, 'targets': targets,
                        'runs': runs.get(case.id, {})})
    return records


def speedup(ratio_value: float | None, higher_is_better: bool) -> float | None:
    """A ratio ours/reference turned into "times better" (>1 is better) for either direction."""
    if ratio_value is None or ratio_value <= 0:
        return None
    return ratio_value if higher_is_better else 1 / ratio_value


def saved_results(results_dir: str, commands: dict[str, str]
                  ) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(file name, command options, saved JSON)`` of each file of ``commands`` that exists."""
    for name, options in commands.items():
        path = os.path.join(results_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                yield name, options, json.load(f)
