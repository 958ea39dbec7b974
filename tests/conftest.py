"""Suite-wide scheduling for pytest-xdist (``scripts/test.sh`` runs ``--dist loadgroup``).

A module-scoped fixture runs once per worker that runs any of the module's tests. With plain
``load`` scheduling, xdist deals a module's tests to both workers, so an expensive module fixture
(a reference subprocess, a multi-process run, a written dataset) was computed twice; the
cross-library resume matrix alone cost minutes that way, and each worker started its own
SparkSession. So every module with a module-scoped fixture is one unit of work: its tests run on
one worker, which computes the fixture once, while the other worker takes the rest of the suite.
Modules marked ``pytest.mark.xdist_group('name')`` share the unit ``name`` (the Spark tests of
two directories share one SparkSession that way).

xdist's own ``loadgroup`` reads the marks by renaming the collected items, which pytest 9 no
longer allows (the groups were silently ignored), so the scheduler below groups by module source
instead: ``scope='module'`` or a module-level ``xdist_group`` mark in the file.

xdist hands out work in collection order (``--no-loadscope-reorder``), so the modules that take
longest (measured: multi-process jobs, Spark, the reference oracles) are collected first: a long
module never starts last and runs alone at the tail while the other worker idles.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

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
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODULE_FIXTURE = re.compile(r"""scope=['"]module['"]""")
_GROUP_MARK = re.compile(r"""^pytestmark = pytest\.mark\.xdist_group\(['"]([^'"]+)['"]\)""", re.M)


def _module(nodeid: str) -> str:
    return nodeid.split('::', 1)[0]


@functools.cache
def module_group(module: str) -> str | None:
    """The unit of work of a test module (its path from the root): its ``xdist_group`` mark's
    name, its own path when it has a module-scoped fixture, else None (each test alone)."""
    try:
        with open(os.path.join(ROOT, module)) as f:
            source = f.read()
    except OSError:
        return None
    named = _GROUP_MARK.search(source)
    if named:
        return named.group(1)
    return module if _MODULE_FIXTURE.search(source) else None


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: xdist's scope scheduling, with the units of ``module_group``."""
    if config.getvalue('dist') != 'loadgroup':
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = module_group(_module(nodeid))
            return f'group:{group}' if group else nodeid

    return ModuleGroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest modules first (a stable sort: every other order is kept)."""
    rank = {module: number for number, module in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(SLOW_FIRST)))
