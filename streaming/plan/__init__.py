"""Plan a run before paying for it: throughput, stalls, cache and egress, predicted.

``plan`` replays the run's real epoch order (``streaming.order``) through a model of the node's
download schedule (``cache/prefetch.py``) and cache (``cache/shard_cache.py``) over a link
profile, and reports per node: time to first batch, throughput over steps, stalled steps, bytes
fetched and their cost, cache occupancy, GETs against the store's limit and shuffle quality.
Modules: ``profiles`` (links and stores), ``inputs`` (dataset shape, run settings), ``orders``
(the engine's orders as steps), ``simulate`` (one node in simulated time) and ``pieces``
(what it moves), ``quality``,
``core`` (the plan), ``suggest`` (advice) and ``report`` (text, JSON, HTML). The CLI is
``streaming plan``; see docs/plan.md.
"""

from __future__ import annotations

from typing import Any

from streaming.plan.inputs import DatasetShape, RunSettings
from streaming.plan.profiles import PRESETS, LinkProfile, get_profile

__all__ = ['PRESETS', 'DatasetShape', 'LinkProfile', 'RunSettings', 'get_profile', 'plan']


def plan(dataset: str | list[str] | DatasetShape, run: RunSettings | None = None,
         profile: str | LinkProfile = 'same-region', *, find_min_cache: bool | None = None,
         suggest_target: float | None = None, suggest: bool = False,
         **options: Any) -> dict[str, Any]:
    """Plan a run over ``dataset`` (URL(s) of datasets, or a ``DatasetShape``).

    Returns the plan as a JSON-ready dict (see ``streaming.plan.core.make_plan``), with
    ``cache.min_no_refetch`` if ``find_min_cache`` (None: when the plan took under half a
    second, so that the few more plans it takes stay quick) and a ``suggestion`` if
    ``suggest``.
    """
    from streaming.plan.core import make_plan
    shape = dataset if isinstance(dataset, DatasetShape) else DatasetShape.from_urls(
        [dataset] if isinstance(dataset, str) else list(dataset))
    run = run or RunSettings()
    if 'in_flight' not in options:  # As the node's scheduler reads it.
        from streaming.cache.concurrency import in_flight_setting
        options['in_flight'] = in_flight_setting()
    link = get_profile(profile) if isinstance(profile, str) else profile
    result = make_plan(shape, run, link, **options)
    options.pop('quality', None)  # The searches below plan without it.
    if find_min_cache or (find_min_cache is None and result['planned_in_s'] < 0.5):
        from streaming.plan.suggest import smallest_cache_without_refetch
        result['cache']['min_no_refetch'] = smallest_cache_without_refetch(
            shape, run, link, result['cache']['working_set_bytes'], **options)
    if suggest:
        from streaming.plan.suggest import suggest as advise
        result['suggestion'] = advise(shape, run, link, suggest_target, **options)
    return result
