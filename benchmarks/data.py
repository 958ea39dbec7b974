"""Benchmark data on disk: generated sources, and each implementation's own copy of a dataset.

Layout under ``<data root>/<scale>/``: ``source/<name>/`` (numpy files, deterministic),
``<impl>/<dataset>/`` (written by that implementation: MDS for ours and the reference, LitData's
chunks for LitData) with a ``<impl>/<dataset>.done`` stamp next to it, and ``scratch/``.
Everything is created only when missing (or when its stamp no longer matches its spec).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from benchmarks.cases import sources
from benchmarks.config import MACHINE, OURS, Context, DatasetSpec
from benchmarks.runner import run_worker


def _log(message: str) -> None:
    print(f'[data] {message}', file=sys.stderr, flush=True)


def ensure_sources(ctx: Context, names: set[str]) -> None:
    """Generate the sources of ``names`` that are missing, and note their payload sizes."""
    for name in sorted(names):
        samples = ctx.scale.samples[name]
        if not sources.is_generated(ctx.data_dir, name, samples):
            _log(f'generating source {name} ({samples} samples) ...')
            sources.generate(ctx.data_dir, name, samples)
        source = sources.Source(ctx.data_dir, name)
        ctx.payload_total[name] = source.total_payload_bytes()
        ctx.payload_per_sample[name] = ctx.payload_total[name] / len(source)


def _stamp(ctx: Context, impl: str, spec: DatasetSpec) -> str:
    return ctx.dataset_dir(impl, spec.name) + '.done'


def _stamp_text(ctx: Context, spec: DatasetSpec) -> str:
    samples = ctx.scale.samples.get(spec.source, 0)
    return json.dumps({**asdict(spec), 'source_samples': samples}, sort_keys=True)


def ensure_dataset(ctx: Context, impl: str, python: str, spec: DatasetSpec,
                   timeout: float) -> str | None:
    """Write ``impl``'s copy of ``spec`` if missing; returns None or why it could not."""
    impl = OURS if impl == MACHINE else impl
    stamp = _stamp(ctx, impl, spec)
    try:
        with open(stamp) as f:
            if f.read() == _stamp_text(ctx, spec):
                return None
    except OSError:
        pass
    _log(f'writing {impl} copy of {spec.name} ...')
    params = {'data_dir': ctx.data_dir, 'dataset': spec.source, 'kind': spec.kind,
              'out': ctx.dataset_dir(impl, spec.name), 'size_limit': spec.size_limit,
              'samples': spec.samples, 'shards': spec.shards}
    result = run_worker(python, 'prepare.py', impl, params, ctx.scratch, timeout)
    if result['status'] != 'ok':
        return f'preparing {spec.name} failed: {result.get("reason", result["status"])}'
    _log(f'  {impl} {spec.name}: {result["metrics"]["seconds"]:.1f} s')
    with open(stamp, 'w') as f:
        f.write(_stamp_text(ctx, spec))
    return None
