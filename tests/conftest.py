"""Suite-wide scheduling for pytest-xdist (``scripts/test.sh`` runs ``--dist loadgroup``).

A module-scoped fixture runs once per worker that runs any of the module's tests. With plain
``load`` scheduling, xdist deals a module's tests to both workers, so an expensive module fixture
(a reference subprocess, a multi-process run, a written dataset) was computed twice; the
cross-library resume matrix alone cost minutes that way, and each worker started its own
SparkSession. Every test that uses a module-scoped fixture is therefore put into an
``xdist_group`` named after its module: the module's tests run on one worker, which computes the
fixture once, while the other worker takes the rest of the suite.

xdist hands out work in collection order (``--no-loadscope-reorder``), so the modules that take
longest (measured: multi-process jobs, Spark, the reference oracles) are collected first: a long
module never starts last and runs alone at the tail while the other worker idles.
"""

from __future__ import annotations

import pytest

# Longest first (profiled with ``--durations``); every other module follows in its usual order.
SLOW_FIRST = (
    'tests/compat/test_cross_resume.py',
    'tests/convert/test_spark.py',
    'tests/tokens/test_spark.py',
    'tests/dataset/test_distributed.py',
    'tests/dataset/test_index_order.py',
    'tests/dataset/test_setup_cache.py',
    'tests/compat/test_vision.py',
    'tests/compat/test_text_multimodal.py',
    'tests/dataset/test_handoff.py',
    'tests/dataset/test_workers.py',
    'tests/dataset/test_prefetch_takeover.py',
    'tests/dataset/test_extending_shuffle.py',
    'tests/compat/test_user_incompat.py',
    'tests/compat/test_base_oracle.py',
    'tests/compat/test_edges.py',
    'tests/order/test_oracle_batching.py',
    'tests/dataset/test_collisions.py',
    'tests/compat/test_docs_snippets.py',
    'tests/compat/test_surface.py',
    'tests/storage/test_faults_e2e.py',
    'tests/tokens/test_rotation_s3.py',
    'tests/format/test_interop.py',
    'tests/order/test_oracle_order.py',
    'tests/order/test_oracle_registries.py',
)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split('::', 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow modules first; one group per module with a module-scoped fixture (before xdist
    reads the groups)."""
    rank = {module: number for number, module in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item), len(SLOW_FIRST)))  # stable
    for item in items:
        if item.get_closest_marker('xdist_group') is not None:
            continue
        info = getattr(item, '_fixtureinfo', None)
        if info is None:
            continue
        if any(definition.scope == 'module' for definitions in info.name2fixturedefs.values()
               for definition in definitions):
            item.add_marker(pytest.mark.xdist_group(_module(item)))
