"""A cold shuffled epoch from S3 through an emulated network link: ours, the reference, LitData.

The case of issue 19: 300 MB of ~100 KB samples in ~74 shards of ~4 MB (``images`` source,
3,000 samples), ``StreamingDataset(remote='s3://...', local=<empty>, shuffle=True,
batch_size=32)`` through ``StreamingDataLoader(ds, batch_size=32, num_workers=2)`` (LitData: its
own ``StreamingDataset`` / ``StreamingDataLoader``), every setting default, into a fresh cache.
moto serves the bucket behind the link emulator, with the profile's time to first byte and
rate caps: by default the kernel link (``benchmarks.linkemu_kernel``: moto in a network
namespace, htb on its veth, no user-space copy), or the asyncio proxy (``benchmarks.linkemu``)
with ``--link proxy`` or where the kernel link cannot be set up (the reason is printed). For
each profile and repeat, the implementations run one after another in fresh processes, the
link's counters reset before each run.

Reported per implementation (medians over repeats, min-max): payload MB/s over the epoch (the
clock starts before the dataset is built), share of the link (bytes through the link per second
over the link's rate), time to first batch, time from the start to the first request, downloads
in flight (max, time-weighted mean), GETs / ranged GETs / HEADs, bytes fetched over the
dataset's bytes, and the cache directory's peak size. ``--cache-limit`` adds the same epoch with
``cache_limit`` (LitData: ``max_cache_size``) at 25% of the dataset.

``--dataset tokens``: the many-small-shards case instead, 150,000 samples of 2 KiB (1,024
uint16 tokens, the ``tokens`` source) in shards of ``--shard-bytes`` (default 500 KB: ~620
shards of ~240 samples), same loader settings.

``--batch-size N`` reads with batches of N samples instead of 32 (for ``tokens``, to tell the
link's cost from the batch path's: docs/benchmarks.md, issue 31).

``--dataset big``: a few shards of ~1 GiB, 3,200 samples of ~1 MB (the ``big`` source: 3.2 GB
in 3 shards of ``--shard-bytes``, default 1 GiB), same loader settings; with so few shards each
is in the epoch's tail, fetched as ranged parts. moto serves GETs of objects this big through
``benchmarks.moto_big`` (a range read at the cost of the range; moto itself would read the
whole 1 GiB object for every part).

Per run the server side's CPU is taken too (``benchmarks.server_cpu``: moto and its link layer,
and the machine's softirq time), per GB of payload, with the share of the link it leaves a
client spending 0-30 CPU-s/GB on this machine's cores. ``--close-connections``: the kernel
link's moto closes every connection after one request (werkzeug's server, as before
2026-11-29); by default it keeps them, as S3 does.

    .venv/bin/python -m benchmarks.link_bench --profiles same-region --repeats 3
    .venv/bin/python -m benchmarks.link_bench --dataset tokens --impls ours litdata
    .venv/bin/python -m benchmarks.link_bench --dataset big --repeats 2 --timeout 600
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

from benchmarks.aggregate import saved_results
from benchmarks.cases import sources
from benchmarks.competing_load import competing_load
from benchmarks.config import LITDATA, OURS, REFERENCE
from benchmarks.envs import pythons
from benchmarks.linkemu import PROFILES
from benchmarks.linkemu_kernel import open_link
from benchmarks.runner import run_worker
from benchmarks.server_cpu import ServerCpu, ceiling_rows

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Per dataset: (samples, default shard bytes).
DATASETS = {'images': (3000, 4_100_000), 'tokens': (150_000, 500_000),
            'big': (3200, 1 << 30)}
SAMPLES, SHARD_BYTES = DATASETS['images']
METRICS = ('mb_per_s', 'link_share', 'first_batch_s', 'first_request_s', 'max_in_flight',
           'mean_in_flight', 'get_requests', 'ranged_gets', 'head_requests', 'fetched_ratio',
           'peak_cache_mb', 'epoch_s', 'cpu_s_per_gb', 'cpu_s_per_gb_with_collect',
           'server_cpu_s_per_gb', 'softirq_s_per_gb', 'machine_cpu_s_per_gb', 'steal_s_per_gb',
           'link_rate')


def _log(message: str) -> None:
    print(f'[link] {message}', file=sys.stderr, flush=True)


def prepare(data_dir: str, impls: list[str], python: dict[str, str], dataset: str = 'images',
            shard_bytes: int = SHARD_BYTES) -> dict[str, str]:
    """Each implementation's copy of the dataset (written once); returns their directories."""
    samples = DATASETS[dataset][0]
    if not sources.is_generated(data_dir, dataset, samples):
        _log(f'generating {samples} {dataset} samples ...')
        sources.generate(data_dir, dataset, samples)
    dirs = {}
    for impl in impls:
        out = os.path.join(data_dir, impl, f'{dataset}-{shard_bytes}')
        dirs[impl] = out
        if os.path.exists(out + '.done'):
            continue
        _log(f'writing {impl} copy ...')
        params = {'data_dir': data_dir, 'dataset': dataset, 'kind': 'plain', 'out': out,
                  'size_limit': shard_bytes}
        result = run_worker(python[impl], 'prepare.py', impl, params,
                            os.path.join(data_dir, 'scratch'), 1800)
        if result['status'] != 'ok':
            raise RuntimeError(f'writing {impl} copy failed: {result}')
        open(out + '.done', 'w').close()
    return dirs


def _dir_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
               if os.path.isfile(os.path.join(directory, n)))


def one_run(impl: str, python: str, link: Any, profile_rate: float, total: int,
            params: dict[str, Any], scratch: str, timeout: float) -> dict[str, Any]:
    link.reset()
    with ServerCpu(link.server_pids()) as server_cpu:
        result = run_worker(python, 'remote.py', impl, {**params, 'endpoint': link.endpoint},
                            scratch, timeout)
    if result['status'] != 'ok':
        return result
    m = result['metrics']
    m.update(server_cpu.result(m['samples'] * params['payload_per_sample']))
    m['link_rate'] = profile_rate
    stats = link.stats()
    m['link_share'] = stats['bytes_out'] / m['epoch_s'] / profile_rate
    m['first_request_s'] = (stats['first_request_wall'] or m['start_wall']) - m['start_wall']
    m['max_in_flight'] = stats['max_in_flight']
    m['mean_in_flight'] = stats['mean_in_flight']
    m['get_requests'] = stats['get_requests']
    m['ranged_gets'] = stats['requests'].get('GET_RANGE', 0)
    m['head_requests'] = stats['head_requests']
    m['fetched_ratio'] = stats['bytes_out'] / total
    m['peak_cache_mb'] = m.get('peak_cache_bytes', 0) / 1e6
    return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r['metrics'] for r in runs if r['status'] == 'ok']
    if not ok:
        return {'status': runs[0]['status'] if runs else 'not run',
                'reason': runs[0].get('reason') if runs else None}
    out: dict[str, Any] = {'status': 'ok', 'n': len(ok)}
    for name in METRICS:
        values = [m[name] for m in ok if m.get(name) is not None]
        if values:
            out[name] = {'median': statistics.median(values), 'min': min(values),
                         'max': max(values)}
    return out


def table(results: dict[str, Any]) -> str:
    """A markdown table per case: one row per implementation."""
    lines = []
    for case, by_impl in results.items():
        lines += [f'**{case}**', '',
                  '| | MB/s | share of link | first batch s | first request s | in flight max '
                  '/ mean | GET / ranged / HEAD | fetched / dataset | peak cache MB | '
                  'CPU s/GB (with the harness\'s gc.collect) | server / softirq / machine '
                  'CPU s/GB |',
                  '|---|---|---|---|---|---|---|---|---|---|---|']
        for impl, s in by_impl.items():
            if s.get('status') != 'ok':
                lines.append(f'| {impl} | {s.get("status")}: {s.get("reason")} |')
                continue

            def med(name: str, fmt: str = '.2f', s: dict = s) -> str:
                return format(s[name]['median'], fmt) if name in s else '-'
            lines.append(
                f'| {impl} | {med("mb_per_s", ".1f")} ({s["mb_per_s"]["min"]:.1f}-'
                f'{s["mb_per_s"]["max"]:.1f}) | {med("link_share")} | {med("first_batch_s")} | '
                f'{med("first_request_s")} | {med("max_in_flight", ".0f")} / '
                f'{med("mean_in_flight", ".1f")} | {med("get_requests", ".0f")} / '
                f'{med("ranged_gets", ".0f")} / {med("head_requests", ".0f")} | '
                f'{med("fetched_ratio")} | {med("peak_cache_mb", ".0f")} | '
                f'{_cpu_cells(s, med)} | {med("server_cpu_s_per_gb", ".1f")} / '
                f'{med("softirq_s_per_gb", ".1f")} / {med("machine_cpu_s_per_gb", ".1f")} |')
        ours = by_impl.get(OURS, {})
        for other in (REFERENCE, LITDATA):
            theirs = by_impl.get(other, {})
            if ours.get('status') == 'ok' and theirs.get('status') == 'ok':
                speed = ours['mb_per_s']['median'] / theirs['mb_per_s']['median']
                first = ours['first_batch_s']['median'] / theirs['first_batch_s']['median']
                cpu = ''
                if 'cpu_s_per_gb' in ours and 'cpu_s_per_gb' in theirs:
                    ratio = ours['cpu_s_per_gb']['median'] / theirs['cpu_s_per_gb']['median']
                    cpu = f', CPU/GB {ratio:.2f}x'

                lines.append(f'\nours / {other}: MB/s {speed:.2f}x, time to first batch '
                             f'{first:.2f}x{cpu}')
        lines += [line for impl, s in by_impl.items() for line in _ceiling_lines(impl, s)]
        lines.append('')
    return '\n'.join(lines)


def _ceiling_lines(impl: str, s: dict[str, Any]) -> list[str]:
    """The link share the server side's CPU leaves reachable for a client spending 0-30 CPU-s/GB
    (benchmarks.server_cpu); nothing for runs saved before servers were accounted."""
    if s.get('status') != 'ok' or 'server_cpu_s_per_gb' not in s or 'link_rate' not in s:
        return []
    server, softirq = s['server_cpu_s_per_gb']['median'], s['softirq_s_per_gb']['median']
    rows = ceiling_rows(server, softirq, s['link_rate']['median'])
    caps = ', '.join(f'{r["client_cpu_s_per_gb"]:.0f} -> {r["share_cap"]:.2f}' for r in rows)
    return [f'\n{impl}: server {server:.1f} + softirq {softirq:.1f} CPU-s/GB; share of the link '
            f'reachable on {os.cpu_count()} cores for a client spending (CPU-s/GB) {caps}']


def _cpu_cells(s: dict[str, Any], med: Callable[[str, str], str]) -> str:
    """'without (with)' the harness's gc.collect; runs saved before the split only have 'with'."""
    if 'cpu_s_per_gb_with_collect' in s:
        return f'{med("cpu_s_per_gb", ".1f")} ({med("cpu_s_per_gb_with_collect", ".1f")})'
    return f'- ({med("cpu_s_per_gb", ".1f")})'


def _without_runs(results: dict[str, Any]) -> dict[str, Any]:
    return {case: {k: v for k, v in by.items() if not k.startswith('_')}
            for case, by in results.items()}


COMMANDS = {
    'link-same-region.json': '--profiles same-region --repeats 3 --timeout 240',
    'link-same-region-cache25.json': '--profiles same-region --only-cache-limit --repeats 3 '
                                     '--impls ours litdata --timeout 200',
    'link-cross-region.json': '--profiles cross-region --repeats 2 --timeout 200',
    'link-uncapped.json': '--profiles uncapped --repeats 2 --impls ours litdata --timeout 200',
    'link-tokens-same-region.json': '--dataset tokens --profiles same-region --repeats 2 '
                                    '--impls ours litdata --timeout 200',
    'link-tokens-uncapped.json': '--dataset tokens --profiles uncapped --repeats 1 '
                                 '--impls ours litdata --timeout 200',
    'link-big-same-region.json': '--dataset big --profiles same-region --repeats 2 '
                                 '--impls ours reference --timeout 400',
    # CPU per GB (issue 31), all three implementations, at rest and beside 2 busy processes.
    'link-cpu-same-region.json': '--profiles same-region --repeats 3 --timeout 240',
    'link-cpu-same-region-load2.json': '--profiles same-region --repeats 3 --timeout 300 '
                                       '--competing-load 2',
    'link-cpu-tokens-same-region.json': '--dataset tokens --profiles same-region --repeats 3 '
                                        '--timeout 300',
    'link-cpu-same-region-w0.json': '--profiles same-region --repeats 3 --timeout 300 '
                                    '--workers 0',
    # The same two after reads began waiting for whole chunks (SO_RCVLOWAT, s3_light.body).
    'link-cpu-same-region-rcvlowat.json': '--profiles same-region --repeats 3 --timeout 300',
    'link-cpu-same-region-load2-rcvlowat.json': '--profiles same-region --repeats 3 '
                                                '--timeout 300 --competing-load 2',
    # The same two with preallocated files and ISA-L's CRC32; CPU without the harness's
    # gc.collect() (the figure with it in brackets).
    'link-cpu-same-region-fallocate.json': '--profiles same-region --repeats 3 --timeout 300',
    'link-cpu-same-region-load2-fallocate.json': '--profiles same-region --repeats 3 '
                                                 '--timeout 300 --competing-load 2',
    # What caps 2 KiB tokens here: the server side's CPU, all three, with and without
    # keep-alive (docs/benchmarks.md).
    'link-tokens-ceiling-close.json': '--dataset tokens --profiles same-region --repeats 2 '
                                      '--timeout 240 --close-connections',
    'link-tokens-ceiling.json': '--dataset tokens --profiles same-region --repeats 2 '
                                '--timeout 240',
}


def self_check_lines(path: str) -> list[str]:
    """The emulator's saved self-checks (one JSON per line), as a table."""
    if not os.path.exists(path):
        return []
    lines = ['What the emulator itself delivered at the time (`python -m benchmarks.linkemu '
             '--self-check --profile P --mode M --seconds 2 --json`; *kernel*: moto in a network '
             'namespace shaped by tc, *proxy*: the asyncio proxy; all on the same 2 cores):', '',
             '| link | profile (TTFB, per connection, link) | TTFB ms | one connection MB/s | '
             'connections | aggregate MB/s (share of link) | load |',
             '|---|---|---|---|---|---|---|']
    with open(path) as f:
        for line in f:
            c = json.loads(line)
            p = c['profile']
            lines.append(f'| {c.get("mode", "proxy")} | {p["ttfb"] * 1e3:.0f} ms, '
                         f'{p["conn_rate"] / 1e6:.0f} MB/s, '
                         f'{p["link_rate"] / 1e6:.0f} MB/s | {c["ttfb_s"] * 1e3:.1f} | '
                         f'{c["one_connection_mb_per_s"]:.1f} | {c["connections"]} | '
                         f'{c["aggregate_mb_per_s"]:.1f} '
                         f'({c["aggregate_mb_per_s"] * 1e6 / p["link_rate"]:.2f}) | '
                         f'{c.get("load", "-")} |')
    return lines + ['']


def saved_section(results_dir: str) -> list[str]:
    """The docs page's section for the saved runs of ``COMMANDS`` (nothing if none is saved)."""
    lines: list[str] = self_check_lines(os.path.join(results_dir, 'linkemu-selfcheck.jsonl'))
    for name, options, saved in saved_results(results_dir, COMMANDS):
        shown = _without_runs(saved['results'])
        load = ', '.join(f'{x:.1f}' for x in saved.get('load', []))
        link = saved.get('link', 'proxy')
        lines += [f'`python -m benchmarks.link_bench {options} --link {link} --out '
                  f'benchmarks/results/{name}` ({link} link; run of {saved["date"]}, load '
                  f'average after: {load}):', '', table(shown)]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--profiles', nargs='+', default=['same-region'],
                        choices=sorted(PROFILES))
    parser.add_argument('--impls', nargs='+', default=[OURS, REFERENCE, LITDATA])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--cache-limit', action='store_true',
                        help='also run the epoch with cache_limit at 25%% of the dataset')
    parser.add_argument('--only-cache-limit', action='store_true')
    parser.add_argument('--dataset', choices=sorted(DATASETS), default='images',
                        help='images: ~100 KB samples in ~4 MB shards (issue 19\'s case); '
                             'tokens: 2 KiB samples in small shards; big: ~1 MB samples in '
                             '3 shards of ~1 GiB')
    parser.add_argument('--shard-bytes', type=int, default=None,
                        help='shard size limit (default: the dataset\'s, see DATASETS)')
    parser.add_argument('--timeout', type=float, default=300, help='seconds per run')
    parser.add_argument('--link', choices=['auto', 'kernel', 'proxy'], default='auto',
                        help='the emulator: kernel (netns + tc), proxy, or kernel if possible')
    parser.add_argument('--workers', type=int, default=2,
                        help='DataLoader workers (the case name says so when not 2)')
    parser.add_argument('--batch-size', type=int, default=32,
                        help='samples per batch (the case name says so when not 32)')
    parser.add_argument('--competing-load', type=int, default=0, metavar='N',
                        help='N busy processes beside every run (benchmarks.competing_load); '
                             'the case name says so')
    parser.add_argument('--close-connections', action='store_true',
                        help='the kernel link\'s server closes every connection after one '
                             'request (werkzeug\'s server; the default keeps them, as S3 does)')
    parser.add_argument('--data-dir', default=os.path.join(REPO, 'benchmarks', '.data', 'link'))
    parser.add_argument('--out', default=os.path.join(REPO, 'benchmarks', 'results',
                                                      'link.json'))
    args = parser.parse_args(argv)
    python = pythons(set(args.impls))
    samples, default_shard = DATASETS[args.dataset]
    shard_bytes = args.shard_bytes or default_shard
    dirs = prepare(args.data_dir, args.impls, python, args.dataset, shard_bytes)
    scratch = os.path.join(args.data_dir, 'scratch')
    payload = sources.Source(args.data_dir, args.dataset).total_payload_bytes() / samples
    name_prefix = '' if args.dataset == 'images' else \
        f'{args.dataset} ({samples} samples, {shard_bytes} B shards), '
    results: dict[str, Any] = {}
    load_before = os.getloadavg()
    os.environ.update({'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing'})
    with open_link(PROFILES['uncapped'], 'linkbench', args.link,
                   keep_alive=not args.close_connections) as link:
        _log(f'link emulator: {link.mode}')
        key = os.path.basename(dirs[args.impls[0]])
        totals = {impl: link.upload_dir(dirs[impl], f'{impl}/{key}') for impl in args.impls}
        limits = [None] * (not args.only_cache_limit) + \
            [0.25] * (args.cache_limit or args.only_cache_limit)
        for name in args.profiles:
            profile = PROFILES[name]
            link.set_profile(profile)
            for fraction in limits:
                case = f'{name_prefix}{name}' + ('' if fraction is None else
                                                   ', cache_limit 25%') + \
                    (f', {args.workers} workers' if args.workers != 2 else '') + \
                    (f', batch {args.batch_size}' if args.batch_size != 32 else '') + \
                    (f', competing load {args.competing_load}' if args.competing_load else '')
                runs: dict[str, list] = {impl: [] for impl in args.impls}
                for repeat in range(args.repeats):
                    for impl in args.impls:
                        params = {'bucket': 'linkbench', 'prefix': f'{impl}/{key}',
                                  'scratch': scratch, 'batch_size': args.batch_size,
                                  'num_workers': args.workers,
                                  'shuffle': True, 'payload_per_sample': payload,
                                  'watch_disk': True,
                                  'cache_limit': None if fraction is None else
                                  int(totals[impl] * fraction)}
                        with competing_load(args.competing_load):
                            result = one_run(impl, python[impl], link, profile.link_rate,
                                             totals[impl], params, scratch, args.timeout)
                        runs[impl].append(result)
                        m = result.get('metrics', {})
                        _log(f'{case} #{repeat} {impl}: {result["status"]} '
                             f'{m.get("mb_per_s", 0):.1f} MB/s, share '
                             f'{m.get("link_share", 0):.2f}, first batch '
                             f'{m.get("first_batch_s", 0):.2f} s, in flight '
                             f'{m.get("max_in_flight", 0)}/{m.get("mean_in_flight", 0):.1f}'
                             f'{"" if result["status"] == "ok" else result.get("reason")}')
                results[case] = {impl: summarise(r) for impl, r in runs.items()}
                results[case]['_runs'] = runs  # type: ignore[assignment]
    shown = _without_runs(results)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump({'date': time.strftime('%Y-%m-%d %H:%M'), 'load': os.getloadavg(),
                   'load_before': load_before, 'competing_load': args.competing_load,
                   'link': link.mode, 'keep_alive': getattr(link, 'keep_alive', False),
                   'results': results}, f, indent=1, default=str)
    print(table(shown))


if __name__ == '__main__':
    main()
