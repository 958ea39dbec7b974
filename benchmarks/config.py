"""What the suite measures: scales, datasets, cases, metrics and targets.

Everything tunable lives here. A *case* is one configuration (say "read tiny, 2 workers,
shuffled") run by a worker script in ``benchmarks/cases/`` once per implementation per repeat.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OURS, REFERENCE, LITDATA, MACHINE = 'ours', 'reference', 'litdata', 'machine'
PLAIN_DATASETS = ('tokens', 'images', 'tiny')
MIB = 1 << 20


@dataclass(frozen=True)
class Scale:
    """Dataset sizes and run lengths of one mode (full or quick)."""

    name: str
    samples: dict[str, int]
    scale_samples: tuple[int, ...]  # Epoch setup / resumption at scale (index-only datasets).
    scale_shards: int
    remote_size_limit: int  # Shard size of the remote copy (cache_limit must hold 4 shards).
    read_seconds: tuple[float, float]  # Min and max of the timed part of a read run.
    random_access_count: int
    repeats: int
    timeout: float  # Per worker run.


FULL = Scale(name='full', samples={'tokens': 200_000, 'images': 5_000, 'tiny': 2_000_000},
             scale_samples=(10_000_000, 100_000_000), scale_shards=50_000,
             remote_size_limit=16 * MIB, read_seconds=(2.0, 4.0), random_access_count=20_000,
             repeats=3, timeout=600.0)
QUICK = Scale(name='quick', samples={'tokens': 20_000, 'images': 500, 'tiny': 200_000},
              scale_samples=(1_000_000, 10_000_000), scale_shards=50_000,
              remote_size_limit=2 * MIB, read_seconds=(0.75, 1.5), random_access_count=5_000,
              repeats=1, timeout=300.0)
SCALES = {s.name: s for s in (FULL, QUICK)}


def count_label(n: int) -> str:
    """10_000_000 -> '10M'."""
    for unit, size in (('B', 10**9), ('M', 10**6), ('k', 10**3)):
        if n >= size and n % size == 0:
            return f'{n // size}{unit}'
    return str(n)


@dataclass(frozen=True)
class DatasetSpec:
    """One implementation-written dataset directory (``<data>/<impl>/<name>``)."""

    name: str
    kind: str  # 'plain' (every sample of a source) or 'scale' (index-only).
    source: str = 'tiny'
    size_limit: int | None = 1 << 26
    samples: int = 0  # For 'scale'.
    shards: int = 0  # For 'scale'.


def dataset_specs(scale: Scale) -> dict[str, DatasetSpec]:
    specs = {name: DatasetSpec(name, 'plain', source=name) for name in PLAIN_DATASETS}
    specs['remote-tokens'] = DatasetSpec('remote-tokens', 'plain', source='tokens',
                                         size_limit=scale.remote_size_limit)
    for n in scale.scale_samples:
        name = f'scale-{count_label(n)}'
        specs[name] = DatasetSpec(name, 'scale', samples=n, shards=scale.scale_shards)
    return specs


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool


@dataclass(frozen=True)
class Target:
    """``ours / baseline`` of ``metric`` must satisfy ``op threshold``.

    ``baseline`` is an implementation, or ``(case_id, metric)`` of another case (a machine limit).
    """

    metric: str
    baseline: str | tuple[str, str]
    op: str  # '>=' or '<='
    threshold: float
    text: str

    def met(self, ratio: float) -> bool:
        return ratio >= self.threshold if self.op == '>=' else ratio <= self.threshold


@dataclass
class Context:
    """Where things are, handed to each case's ``params`` function."""

    data_dir: str  # <data root>/<scale name>
    scale: Scale
    scratch: str
    payload_per_sample: dict[str, float] = field(default_factory=dict)  # Per source dataset.
    payload_total: dict[str, int] = field(default_factory=dict)  # Per source dataset.
    s3_endpoint: str = ''
    s3_bucket: str = 'bench'

    def dataset_dir(self, impl: str, name: str) -> str:
        return os.path.join(self.data_dir, OURS if impl == MACHINE else impl, name)


ParamsFn = Callable[[str, Context], dict[str, Any]]


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    title: str
    script: str
    impls: tuple[str, ...]
    datasets: tuple[str, ...]
    params: ParamsFn
    metrics: tuple[Metric, ...]
    targets: tuple[Target, ...] = ()
    needs_s3: bool = False


SAMPLES_S = Metric('samples_per_s', 'samples/s', 'samples/s', True)
MB_S = Metric('mb_per_s', 'MB/s', 'MB/s', True)
FIRST_BATCH = Metric('first_batch_s', 'time to first batch', 's', False)
# User + system CPU seconds of the job's processes (main, DataLoader workers, threads) per GB
# of sample payload delivered to the loop (``harness.job_cpu_s``).
CPU_GB = Metric('cpu_s_per_gb', 'CPU per GB delivered', 'CPU-s/GB', False)
CPU_TARGETS = (Target('cpu_s_per_gb', REFERENCE, '<=', 0.25, '<= 0.25x reference'),
               Target('cpu_s_per_gb', LITDATA, '<=', 0.5, '<= 0.5x LitData'))


def _write_cases(scale: Scale) -> list[Case]:
    cases = []
    for name in PLAIN_DATASETS:
        for compression in (None, 'zstd'):
            wanted = 2.0 if name == 'tiny' else 1.5
            cases.append(Case(
                id=f'write/{name}/{compression or "raw"}', group='write',
                title=f'write {name}, {compression or "uncompressed"}', script='write.py',
                impls=(OURS, REFERENCE), datasets=(),
                params=lambda impl, ctx, n=name, c=compression: {
                    'data_dir': ctx.data_dir, 'dataset': n, 'compression': c,
                    'out': os.path.join(ctx.scratch, f'write-{impl}-{n}')},
                metrics=(SAMPLES_S, MB_S),
                targets=(Target('samples_per_s', REFERENCE, '>=', wanted,
                                f'>= {wanted:g}x reference'),)))
    return cases


def _read_targets(name: str, workers: int, shuffle: bool) -> tuple[Target, ...]:
    return _speed_targets(name, workers) + (CPU_TARGETS if name != 'tiny' and shuffle else ())


def _speed_targets(name: str, workers: int) -> tuple[Target, ...]:
    if name == 'tiny' and workers == 0:
        return (Target('samples_per_s', REFERENCE, '>=', 20, '>= 20x reference'),
                Target('samples_per_s', LITDATA, '>=', 1, '>= LitData'))
    if name == 'tiny':
        return (Target('samples_per_s', REFERENCE, '>=', 4, '>= 4x reference'),)
    if name == 'images':
        return (Target('mb_per_s', REFERENCE, '>=', 5, '>= 5x reference'),
                Target('mb_per_s', ('raw/images', 'read_mb_per_s'), '>=', 0.5,
                       '>= 0.5x raw read'))
    return ()


def _read_cases(scale: Scale) -> list[Case]:
    cases = []
    for name in PLAIN_DATASETS:
        batch = 32 if name == 'images' else 256
        for workers in (0, 2):
            for shuffle in (False, True):
                cases.append(Case(
                    id=f'read/{name}/w{workers}/{"shuffle" if shuffle else "seq"}',
                    group='read',
                    title=f'read {name}, {workers} workers, '
                          f'{"shuffled" if shuffle else "in order"}',
                    script='read.py', impls=(OURS, REFERENCE, LITDATA), datasets=(name,),
                    params=lambda impl, ctx, n=name, w=workers, s=shuffle, b=batch: {
                        'path': ctx.dataset_dir(impl, n), 'batch_size': b, 'num_workers': w,
                        'shuffle': s, 'min_seconds': ctx.scale.read_seconds[0],
                        'max_seconds': ctx.scale.read_seconds[1],
                        'payload_per_sample': ctx.payload_per_sample[n]},
                    metrics=((MB_S, SAMPLES_S) if name == 'images' else (SAMPLES_S, MB_S))
                    + (FIRST_BATCH, CPU_GB),
                    targets=_read_targets(name, workers, shuffle)))
    return cases


def _plain_targets(name: str, workers: int) -> tuple[Target, ...]:
    if name == 'images':
        return ((Target('mb_per_s', REFERENCE, '>=', 3, '>= 3x reference'),
                 Target('mb_per_s', LITDATA, '>=', 1, '>= LitData')) if workers else ())
    wanted = 4 if workers else 20
    return (Target('samples_per_s', REFERENCE, '>=', wanted, f'>= {wanted}x reference'),)


def _plain_read_cases(scale: Scale) -> list[Case]:
    """Shuffled reads through a bare ``torch.utils.data.DataLoader`` with the default collate."""
    cases = []
    for name in PLAIN_DATASETS:
        batch = 32 if name == 'images' else 256
        for workers in (0, 2):
            cases.append(Case(
                id=f'read_plain/{name}/w{workers}', group='read_plain',
                title=f'torch DataLoader, {name}, {workers} workers, shuffled',
                script='read.py', impls=(OURS, REFERENCE, LITDATA), datasets=(name,),
                params=lambda impl, ctx, n=name, w=workers, b=batch: {
                    'path': ctx.dataset_dir(impl, n), 'batch_size': b, 'num_workers': w,
                    'shuffle': True, 'plain': True,
                    'min_seconds': ctx.scale.read_seconds[0],
                    'max_seconds': ctx.scale.read_seconds[1],
                    'payload_per_sample': ctx.payload_per_sample[n]},
                metrics=(MB_S, SAMPLES_S, FIRST_BATCH) if name == 'images'
                else (SAMPLES_S, MB_S, FIRST_BATCH),
                targets=_plain_targets(name, workers)))
    return cases


def _random_access_cases(scale: Scale) -> list[Case]:
    cases = []
    for api in ('local', 'streaming'):
        for name in PLAIN_DATASETS:
            cls = 'LocalDataset' if api == 'local' else 'StreamingDataset'
            cases.append(Case(
                id=f'random_access/{name}/{api}', group='random_access',
                title=f'{cls}[i], {name}', script='random_access.py',
                impls=(OURS, REFERENCE) if api == 'local' else (OURS, REFERENCE, LITDATA),
                datasets=(name,),
                params=lambda impl, ctx, n=name, a=api: {
                    'path': ctx.dataset_dir(impl, n), 'api': a,
                    'count': ctx.scale.random_access_count,
                    'warmup': ctx.scale.random_access_count // 10, 'seed': 7},
                metrics=(Metric('median_us', 'median latency', 'µs', False),
                         Metric('p99_us', 'p99 latency', 'µs', False)),
                targets=(Target('median_us', REFERENCE, '<=', 0.5, '<= 0.5x reference'),)))
    return cases


def _cache_modes(name: str, largest: str) -> tuple[str, ...]:
    """Our set-up caches (index summary, epoch order): cold always; warm too at the top scale."""
    if not name.startswith('scale-'):
        return ('',)
    return ('cold', 'warm') if name == largest else ('cold',)


def _scale_targets(metric: str, rss: bool) -> tuple[Target, ...]:
    """The issue's targets at the largest scale: <= 0.1x the reference, <= LitData."""
    targets = [Target(metric, REFERENCE, '<=', 0.1, '<= 0.1x reference'),
               Target(metric, LITDATA, '<=', 1.0, '<= LitData')]
    if rss:
        targets += [Target('peak_rss_mb', REFERENCE, '<=', 0.25, '<= 0.25x reference'),
                    Target('peak_rss_mb', LITDATA, '<=', 1.0, '<= LitData')]
    return tuple(targets)


def _resume_cases(scale: Scale) -> list[Case]:
    cases = []
    largest = f'scale-{count_label(scale.scale_samples[-1])}'
    for name in ('tiny', *[f'scale-{count_label(n)}' for n in scale.scale_samples]):
        for mode in _cache_modes(name, largest):
            targets = _scale_targets('first_batch_s', False) if name == largest else ()
            suffix = f'/{mode}' if mode else ''
            cases.append(Case(
                id=f'resume/{name}{suffix}', group='resume',
                title=f'resume at 50%, {name}, shuffled, 2 workers' +
                      (f', our caches {mode}' if mode else ''), script='resume.py',
                impls=(OURS, REFERENCE, LITDATA), datasets=(name,),
                params=lambda impl, ctx, n=name, m=mode: {
                    'path': ctx.dataset_dir(impl, n), 'batch_size': 256, 'num_workers': 2,
                    'shuffle': True, 'fraction': 0.5, 'cache': m or None},
                metrics=(FIRST_BATCH, Metric('peak_rss_mb', 'peak RSS', 'MiB', False)),
                targets=targets))
    return cases


def _epoch_setup_cases(scale: Scale) -> list[Case]:
    cases = []
    largest = f'scale-{count_label(scale.scale_samples[-1])}'
    for n in scale.scale_samples:
        name = f'scale-{count_label(n)}'
        for mode in _cache_modes(name, largest):
            targets = _scale_targets('first_sample_s', True) if name == largest else ()
            cases.append(Case(
                id=f'epoch_setup/{name}/{mode}', group='epoch_setup',
                title=f'epoch setup, shuffled, {count_label(n)} samples in '
                      f'{count_label(scale.scale_shards)} shards, our caches {mode}',
                script='epoch_setup.py', impls=(OURS, REFERENCE, LITDATA), datasets=(name,),
                params=lambda impl, ctx, d=name, m=mode: {'path': ctx.dataset_dir(impl, d),
                                                          'batch_size': 256, 'cache': m},
                metrics=(Metric('first_sample_s', 'time to first sample', 's', False),
                         Metric('peak_rss_mb', 'peak RSS', 'MiB', False)),
                targets=targets))
    return cases


def _remote_cases(scale: Scale) -> list[Case]:
    cases = []
    for limited in (False, True):
        cases.append(Case(
            id=f'remote/tokens/{"cache25" if limited else "nolimit"}', group='remote',
            title='cold epoch from S3 (moto), tokens' + (', cache_limit 25%' if limited else ''),
            script='remote.py', impls=(OURS, REFERENCE, LITDATA), datasets=('remote-tokens',),
            params=lambda impl, ctx, lim=limited: {
                'endpoint': ctx.s3_endpoint, 'bucket': ctx.s3_bucket,
                'prefix': f'{impl}/tokens', 'scratch': ctx.scratch, 'batch_size': 256,
                'num_workers': 2, 'shuffle': False,
                'cache_limit': ctx.payload_total['tokens'] // 4 if lim else None,
                'payload_per_sample': ctx.payload_per_sample['tokens']},
            metrics=(SAMPLES_S, MB_S, FIRST_BATCH),
            targets=() if limited else (Target('samples_per_s', REFERENCE, '>=', 3,
                                               '>= 3x reference'),),
            needs_s3=True))
    return cases


def _raw_cases(scale: Scale) -> list[Case]:
    return [Case(
        id=f'raw/{name}', group='raw', title=f'machine limit, {name} shard files',
        script='raw_limit.py', impls=(MACHINE,), datasets=(name,),
        params=lambda impl, ctx, n=name: {'path': ctx.dataset_dir(impl, n),
                                          'min_seconds': ctx.scale.read_seconds[0]},
        metrics=(Metric('read_mb_per_s', 'read into memory', 'MB/s', True),
                 Metric('floor_ns_per_sample', 'bare slice loop', 'ns/sample', False)))
        for name in PLAIN_DATASETS]


GROUPS: dict[str, Callable[[Scale], list[Case]]] = {
    'raw': _raw_cases,
    'write': _write_cases,
    'random_access': _random_access_cases,
    'read': _read_cases,
    'read_plain': _plain_read_cases,
    'resume': _resume_cases,
    'epoch_setup': _epoch_setup_cases,
    'remote': _remote_cases,
}
GROUP_TITLES = {
    'raw': '7. Machine limit (same shard files)',
    'write': '1. Write throughput (MDSWriter)',
    'random_access': '3. Random access latency, ds[i]',
    'read': '2. Local read through a torch DataLoader',
    'read_plain': '2b. Shuffled read through a bare torch DataLoader (default collate)',
    'resume': '4. Resumption: time to first batch after load_state_dict at 50%',
    'epoch_setup': '5. Epoch setup at scale (index-only datasets)',
    'remote': '6. Remote on loopback: a CPU-cost figure only (no latency, no bandwidth cap)',
}


def build_cases(scale: Scale, groups: list[str] | None = None) -> list[Case]:
    """All cases of the selected groups, in running order."""
    selected = list(GROUPS) if not groups else groups
    unknown = set(selected) - set(GROUPS)
    if unknown:
        raise ValueError(f'unknown case group(s) {sorted(unknown)}; choose from {list(GROUPS)}')
    return [case for group in GROUPS if group in selected for case in GROUPS[group](scale)]
