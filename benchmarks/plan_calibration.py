"""The planner against measurement: ``streaming plan``'s predictions beside real epochs.

Each configuration is run for real through the link emulator the way ``benchmarks.link_bench``
runs it (moto behind the kernel link, or the proxy where that cannot be set up; the issue-19
``images`` dataset, 3,000 samples of ~100 KB in ~74 shards of ~4 MB; ``StreamingDataset`` +
``StreamingDataLoader``, batch 32, 2 workers, shuffled, into an empty cache; the clock starts
before the dataset is built), and planned by ``streaming.plan`` from the same index and settings.
Compared: time to first batch, epoch time, bytes fetched, and bytes fetched again (refetches, as
a share of the dataset), medians over ``--repeats``.

What the plan is given besides the settings: the link as the emulator delivers it (its saved
self-check, ``benchmarks/results/linkemu-selfcheck.jsonl``, gives the share of the nominal rates
it really carries) and this machine's fixed start-up cost (building the dataset, starting the
DataLoader workers), measured here first as the time to first batch over the uncapped link
(no latency, no rate cap) and passed as ``RunSettings.startup_s``. Nothing else is fitted.

Configurations: one node cold epoch (same-region); ``cache_limit`` at 25% of the dataset;
a cross-region link; and a throttled store with several emulated nodes, run by the fleet
emulator (``benchmarks.fleet.run_fleet``: its own dataset, moto store, per-node links and
request budget; every sample checked delivered exactly once). The fleet's start-up and reading
cost on this machine is measured the same way, by fleet epochs over an uncapped link and store.

    flock /work/bench.lock .venv/bin/python -m benchmarks.plan_calibration --repeats 3 --docs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from benchmarks.cases import sources
from benchmarks.config import OURS
from benchmarks.envs import pythons
from benchmarks.link_bench import DATASETS, one_run, prepare
from benchmarks.linkemu import PROFILES
from benchmarks.linkemu_kernel import open_link

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, 'benchmarks', 'results', 'plan-calibration.json')
DOCS = os.path.join(REPO, 'docs', 'plan.md')
BEGIN, END = '<!-- calibration table: begin -->', '<!-- calibration table: end -->'
TOLERANCE = 0.15
METRICS = ('first_batch_s', 'epoch_s', 'fetched_ratio', 'refetched_share')


@dataclass(frozen=True)
class Config:
    name: str
    profile: str
    cache_fraction: float | None = None
    nodes: int = 1
    request_limit: float | None = None


# The throttled store: ``benchmarks.fleet``'s emulated nodes (each its own /dev/shm, cache and
# link port, one rank of 2 DataLoader workers, batch 8 per rank, every step ended by a
# barrier) reading its dataset of 256 KiB shards from one moto store that allows 16 GETs/s
# in all, over the fleet's own link (40 ms to first byte, 2 MB/s a connection, 4 MB/s a node:
# the nodes would ask 64 GETs/s).
FLEET_NODES, FLEET_RPS, FLEET_SHARDS = 4, 16.0, 240
FLEET_NAME = (f'throttled store ({FLEET_RPS:.0f} GETs/s), {FLEET_NODES} nodes, fleet link '
              f'(4 MB/s a node)')
CONFIGS = [
    Config('one node, cold epoch, same-region', 'same-region'),
    Config('cache_limit 25%, same-region', 'same-region', cache_fraction=0.25),
    Config('one node, cold epoch, cross-region', 'cross-region'),
    Config(FLEET_NAME, 'fleet', nodes=FLEET_NODES, request_limit=FLEET_RPS),
]


def _log(message: str) -> None:
    print(f'[plan-calibration] {message}', file=sys.stderr, flush=True)


def delivered_profiles(mode: str) -> dict[str, Any]:
    """Per profile: the share of the nominal per-connection and link rates the emulator carries."""
    path = os.path.join(REPO, 'benchmarks', 'results', 'linkemu-selfcheck.jsonl')
    shares: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                check = json.loads(line)
                if check.get('mode', 'proxy') != mode:
                    continue
                p = check['profile']
                for name, profile in PROFILES.items():
                    if (profile.ttfb, profile.conn_rate, profile.link_rate) == \
                            (p['ttfb'], p['conn_rate'], p['link_rate']):
                        shares[name] = (check['one_connection_mb_per_s'] * 1e6 / p['conn_rate'],
                                        check['aggregate_mb_per_s'] * 1e6 / p['link_rate'])
    return shares


def predict(index_dir: str, config: Config, machine: dict[str, float], shares: dict[str, Any],
            total: int) -> dict[str, float]:
    """The plan's figures for ``config`` (the same settings as the measured run)."""
    from streaming.plan import DatasetShape, RunSettings, get_profile, plan
    shape = DatasetShape.from_urls([index_dir])
    conn_share, link_share = shares.get(config.profile, (1.0, 1.0))
    preset = get_profile(config.profile)
    profile = preset.replace(conn_rate=preset.conn_rate * conn_share,
                             link_rate=preset.link_rate * link_share,
                             request_limit=config.request_limit)
    limit = None if config.cache_fraction is None else int(total * config.cache_fraction)
    run = RunSettings(nodes=config.nodes, workers=2, batch_size=32, cache_limit=limit,
                      build_s=machine['build_s'], startup_s=machine['startup_s'],
                      decode_s_per_sample=machine['decode_s_per_sample'])
    result = plan(shape, run, profile, quality=False)
    node = result['nodes'][0]
    return {'first_batch_s': node['first_batch_s'], 'epoch_s': node['epoch_s'][0],
            'fetched_ratio': node['fetched_bytes'] / total,
            'refetched_share': node['refetched_bytes'] / total}


def measured(runs: list[dict[str, Any]], total: int) -> dict[str, Any]:
    ok = [r['metrics'] for r in runs if r['status'] == 'ok']
    if not ok:
        return {'status': runs[0].get('reason', runs[0]['status']) if runs else 'not run'}
    out: dict[str, Any] = {'status': 'ok', 'n': len(ok)}
    for name in ('first_batch_s', 'epoch_s', 'fetched_ratio'):
        out[name] = statistics.median(m[name] for m in ok)
    if all('refetched_share' in m for m in ok):  # The fleet's, from its nodes' logs.
        out['refetched_share'] = statistics.median(m['refetched_share'] for m in ok)
    else:
        out['refetched_share'] = max(0.0, out['fetched_ratio'] - 1.0)
    return out


def build_seconds(metrics: dict[str, Any], stats: dict[str, Any]) -> float:
    """Seconds from the start to the first shard's GET, less the index's GET (the dataset's
    build, after which the node's schedule starts), from the link's records of one run."""
    records = sorted(stats.get('records') or [], key=lambda r: r[0])
    if len(records) < 2:
        return 0.0
    index_end, first_shard = records[0][2], records[1][0]
    return max(0.0, metrics['first_request_s'] + first_shard - index_end)


def machine_costs(runs: list[dict[str, Any]], samples: int, workers: int) -> dict[str, float]:
    """This machine's start-up and reading cost, from epochs over the uncapped link.

    There the data arrives at once, so the first batch is the start-up (building the dataset,
    starting the workers) and the rest of the epoch is the workers reading, in parallel.
    """
    ok = [r['metrics'] for r in runs if r['status'] == 'ok']
    if not ok:
        raise RuntimeError(f'the uncapped epochs failed: {runs[0]}')
    first = statistics.median(m['first_batch_s'] for m in ok)
    build = statistics.median(m['build_s'] for m in ok)
    rest = statistics.median(m['epoch_s'] - m['first_batch_s'] for m in ok)
    return {'build_s': build, 'startup_s': first, 'decode_s_per_sample': rest * workers / samples,
            'uncapped_epoch_s': statistics.median(m['epoch_s'] for m in ok)}


def delivered_link(stats: dict[str, Any]) -> dict[str, float]:
    """The link as one run's GETs saw it (the link's records): median time to first byte,
    median rate of one transfer, and bytes over the span something was arriving."""
    gets = [r for r in stats.get('records') or [] if r[4].startswith('GET') and r[3] > 0
            and r[2] > r[1]]
    if not gets:
        return {}
    span = max(r[2] for r in gets) - min(r[1] for r in gets)
    return {'ttfb': statistics.median(r[1] - r[0] for r in gets),
            'conn_rate': statistics.median(r[3] / (r[2] - r[1]) for r in gets),
            'link_rate': sum(r[3] for r in gets) / span if span > 0 else 1e12}


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


def single_node_reading_cost(index_dir: str, machine: dict[str, Any], workers: int) -> float:
    """``fit_reading_cost`` for the single-node rows (the uncapped link as its records saw it)."""
    from streaming.plan import DatasetShape, LinkProfile, RunSettings, plan
    link = machine['uncapped_link']
    shape = DatasetShape.from_urls([index_dir])
    profile = LinkProfile(link['ttfb'], link['conn_rate'], link['link_rate'])

    def epoch_of(cost: float) -> float:
        run = RunSettings(workers=workers, batch_size=32, build_s=machine['build_s'],
                          startup_s=machine['startup_s'], decode_s_per_sample=cost)
        return plan(shape, run, profile, quality=False)['nodes'][0]['epoch_s'][0]
    return fit_reading_cost(epoch_of, machine['uncapped_epoch_s'], machine['decode_s_per_sample'])


def error(predicted: float, real: float, name: str) -> float:
    """Relative error; refetches (a share near 0) are compared as bytes fetched instead."""
    if name == 'refetched_share':
        return abs(predicted - real) / (1.0 + real)
    return abs(predicted - real) / real if real else abs(predicted)


def table(results: list[dict[str, Any]]) -> str:
    lines = ['| configuration | | first batch s | epoch s | fetched / dataset | fetched again '
             '/ dataset | within 15% |', '|---|---|---|---|---|---|---|']
    for row in results:
        m, p = row['measured'], row.get('predicted')
        if m.get('status') != 'ok' or p is None:
            lines.append(f'| {row["name"]} | not run: {m.get("status")} | | | | | |')
            continue
        errors = [error(p[k], m[k], k) for k in METRICS]
        ok = all(e <= TOLERANCE for e in errors)
        lines.append(f'| {row["name"]} | measured | {m["first_batch_s"]:.2f} | '
                     f'{m["epoch_s"]:.2f} | {m["fetched_ratio"]:.3f} | '
                     f'{m["refetched_share"]:.3f} | |')
        lines.append(f'| | planned (error) | {p["first_batch_s"]:.2f} ({errors[0]:.0%}) | '
                     f'{p["epoch_s"]:.2f} ({errors[1]:.0%}) | {p["fetched_ratio"]:.3f} '
                     f'({errors[2]:.0%}) | {p["refetched_share"]:.3f} ({errors[3]:.0%}) | '
                     f'{"yes" if ok else "no"} |')
    return '\n'.join(lines)


def write_docs(text: str) -> None:
    with open(DOCS) as f:
        page = f.read()
    if BEGIN not in page or END not in page:
        raise RuntimeError(f'{DOCS} has no calibration markers ({BEGIN} ... {END})')
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(DOCS, 'w') as f:
        f.write(f'{head}{BEGIN}\n{text}\n{END}{tail}')


def fleet_config(config: Config, uncapped: bool = False) -> Any:
    """``benchmarks.fleet``'s settings for ``config`` (uncapped: no store limit, no link cap)."""
    from benchmarks.fleet import FleetConfig
    fleet = FleetConfig(nodes=config.nodes, ranks=1, workers=2, store='s3',
                        allow_rps=config.request_limit, shards=FLEET_SHARDS)
    if uncapped:
        link = PROFILES['uncapped']
        fleet = replace(fleet, allow_rps=None, ttfb=link.ttfb, conn_rate=link.conn_rate,
                        link_rate=link.link_rate)
    return fleet


def _shard_starts(index_dir: str) -> np.ndarray:
    with open(os.path.join(index_dir, 'index.json')) as f:
        counts = [shard['samples'] for shard in json.load(f)['shards']]
    return np.concatenate([[0], np.cumsum(counts)])


def fleet_metrics(report: dict[str, Any], work: str, total: int) -> dict[str, Any]:
    """One fleet epoch's figures, as the single-node runs report them (over the whole fleet).

    First batch and epoch: the slowest rank's, from before its dataset is built. Fetched: every
    node's bytes over the dataset's. Fetched again: each node's bytes beyond the index and the
    shards its own ranks read (from their logs of sample ids), over the dataset's.
    """
    from benchmarks.fleet import _rank_results
    phase = os.path.join(work, 'phase1')
    source = os.path.join(work, 'source')
    ranks = _rank_results(phase)
    starts = _shard_starts(source)
    sizes = [os.path.getsize(os.path.join(source, n)) for n in sorted(os.listdir(source))
             if n.startswith('shard.')]
    index_bytes = os.path.getsize(os.path.join(source, 'index.json'))
    again = 0
    for node, figures in enumerate(report['phase1']['nodes']):
        with open(os.path.join(phase, f'rank{node}.log')) as f:  # One rank per node.
            ids = [i for line in f for i in json.loads(line)[1]]
        read = np.unique(np.searchsorted(starts, ids, 'right') - 1)
        again += max(0, figures['bytes'] - index_bytes - sum(sizes[s] for s in read))
    fetched = sum(n['bytes'] for n in report['phase1']['nodes'])
    return {'first_batch_s': max(r['time_to_first_batch_s'] for r in ranks.values()),
            'epoch_s': max(r['total_s'] for r in ranks.values()),
            'fetched_ratio': fetched / total, 'refetched_share': again / total,
            'throttled': report['total']['throttled'], 'gets': report['total']['gets'],
            'exactly_once': report['exactly_once']['ok'],
            # The rate a node's link carried while it was busy (the uncapped runs' store).
            'link_rate': statistics.median(n['bytes'] / n['busy_span_s'] for n in
                                           report['phase1']['nodes'] if n['busy_span_s'] > 0),
            'samples_per_node': report['samples_in_epoch'] / len(ranks)}


def run_fleet_epochs(config: Config, repeats: int, data_dir: str, uncapped: bool = False
                     ) -> tuple[list[dict[str, Any]], str]:
    """``repeats`` fleet epochs (``benchmarks.fleet.run_fleet``); their runs and dataset."""
    from benchmarks.fleet import run_fleet
    runs = []
    for repeat in range(repeats):
        work = os.path.join(data_dir, f'fleet-{"uncapped" if uncapped else "throttled"}')
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        try:
            report = run_fleet(fleet_config(config, uncapped), work)
        except Exception as error:  # noqa: BLE001 (a failed run is reported, not fatal)
            runs.append({'status': 'failed', 'reason': f'{type(error).__name__}: {error}'})
            continue
        source = os.path.join(work, 'source')
        total = sum(os.path.getsize(os.path.join(source, n)) for n in os.listdir(source))
        metrics = fleet_metrics(report, work, total)
        if not metrics['exactly_once']:
            runs.append({'status': 'failed', 'reason': 'a sample was lost or delivered twice'})
            continue
        _log(f'fleet run {repeat} ({"uncapped" if uncapped else "throttled"}): {metrics}')
        runs.append({'status': 'ok', 'metrics': metrics, 'total': total})
        kept = os.path.join(data_dir, 'fleet-source')
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(source, kept)
    return runs, os.path.join(data_dir, 'fleet-source')


def fleet_machine(runs: list[dict[str, Any]], workers: int) -> dict[str, float]:
    """The fleet's start-up and reading cost on this machine, from its uncapped epochs."""
    from streaming.plan import RunSettings
    ok = [{**r, 'metrics': {**r['metrics'], 'build_s': RunSettings().build_s}} for r in runs
          if r['status'] == 'ok']
    if not ok:
        raise RuntimeError(f'the uncapped fleet epochs failed: {runs[0] if runs else None}')
    # A rank's clock starts once it joined the process group; its dataset's build is then the
    # plan's default (the start-up measured here covers it).
    machine = machine_costs(ok, int(ok[0]['metrics']['samples_per_node']), workers)
    machine['uncapped_link_rate'] = statistics.median(r['metrics']['link_rate'] for r in ok)
    return machine


def predict_fleet(index_dir: str, config: Config, machine: dict[str, Any], total: int,
                  profile: Any = None) -> dict[str, float]:
    """The plan of the fleet row: its dataset, link, store limit and nodes (or ``profile``)."""
    from streaming.plan import DatasetShape, LinkProfile, RunSettings, plan
    fleet = fleet_config(config)
    shape = DatasetShape.from_urls([index_dir])
    profile = profile or LinkProfile(fleet.ttfb, fleet.conn_rate, fleet.link_rate,
                                     request_limit=fleet.allow_rps)
    run = RunSettings(nodes=fleet.nodes, ranks_per_node=fleet.ranks, workers=fleet.workers,
                      batch_size=fleet.batch_size, seed=17, build_s=machine['build_s'],
                      startup_s=machine['startup_s'],
                      decode_s_per_sample=machine['decode_s_per_sample'])
    result = plan(shape, run, profile, quality=False)
    nodes = result['nodes']
    fetched = sum(n['fetched_bytes'] for n in nodes) + shape.index_bytes * len(nodes)
    return {'first_batch_s': max(n['first_batch_s'] for n in nodes),
            'epoch_s': max(n['epoch_s'][0] for n in nodes),
            'fetched_ratio': fetched / total,
            'refetched_share': sum(n['refetched_bytes'] for n in nodes) / total,
            'throttled': sum(n['throttled_gets'] for n in nodes),
            'gets': sum(n['gets'] for n in nodes)}


def fleet_reading_cost(index_dir: str, config: Config, machine: dict[str, Any],
                       total: int) -> float:
    """``fit_reading_cost`` for the fleet: its uncapped epochs over the rate its nodes saw."""
    from streaming.plan import LinkProfile
    rate = machine['uncapped_link_rate']
    profile = LinkProfile(0.0, rate, rate)
    return fit_reading_cost(
        lambda cost: predict_fleet(index_dir, config, {**machine, 'decode_s_per_sample': cost},
                                   total, profile)['epoch_s'],
        machine['uncapped_epoch_s'], machine['decode_s_per_sample'])


def fleet_row(config: Config, repeats: int, data_dir: str) -> dict[str, Any]:
    """The fleet row: this machine's fleet costs (uncapped epochs), then the throttled epochs
    beside their plan."""
    uncapped, _ = run_fleet_epochs(config, repeats, data_dir, uncapped=True)
    machine = fleet_machine(uncapped, 2)
    _log(f'the fleet on this machine: {machine}')
    runs, index_dir = run_fleet_epochs(config, repeats, data_dir)
    real = measured(runs, 0)
    ok = [r for r in runs if r['status'] == 'ok']
    if not ok:
        return {'name': config.name, 'measured': real, 'runs': runs}
    machine['decode_upper_bound'] = machine['decode_s_per_sample']
    machine['decode_s_per_sample'] = fleet_reading_cost(index_dir, config, machine,
                                                        ok[0]['total'])
    guess = predict_fleet(index_dir, config, machine, ok[0]['total'])
    _log(f'{config.name}: measured {real}, planned {guess}')
    return {'name': config.name, 'measured': real, 'predicted': guess, 'runs': runs,
            'machine': machine}


BIG_PLAN = ['plan', '--synthetic-samples', '1b', '--shard-samples', '10k', '--sample-bytes',
            '2kb', '--nodes', '16', '--ranks-per-node', '8', '--workers', '8', '--profile',
            'cross-region', '--json']


def time_big_plan() -> dict[str, Any]:
    """Wall seconds of ``streaming plan`` for a 1 B-sample dataset, as a user runs it."""
    import subprocess
    env = {**os.environ, 'PYTHONPATH': REPO}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, '-m', 'streaming', *BIG_PLAN], capture_output=True,
                          text=True, env=env, check=True)
    seconds = time.perf_counter() - start
    return {'seconds': seconds, 'load': os.getloadavg(),
            'planned_in_s': json.loads(done.stdout)['planned_in_s']}


# The saved runs of ``benchmarks.link_bench`` with the same dataset and loader settings.
SAVED = {'one node, cold epoch, same-region': ('link-same-region.json', 'same-region'),
         'cache_limit 25%, same-region': ('link-same-region-cache25.json',
                                          'same-region, cache_limit 25%'),
         'one node, cold epoch, cross-region': ('link-cross-region.json', 'cross-region')}


def against_saved(index_dir: str) -> tuple[str, list[dict[str, Any]]]:
    """The plan (default machine costs) beside ``link_bench``'s saved runs of the same cases."""
    from streaming.plan import RunSettings
    results, notes = [], []
    defaults = RunSettings()
    machine = {'build_s': defaults.build_s, 'startup_s': defaults.startup_s,
               'decode_s_per_sample': defaults.decode_s_per_sample}
    for config in CONFIGS:
        if config.name not in SAVED:
            continue
        name, case = SAVED[config.name]
        with open(os.path.join(REPO, 'benchmarks', 'results', name)) as f:
            saved = json.load(f)
        ours = saved['results'][case][OURS]
        total = sum(os.path.getsize(os.path.join(index_dir, n)) for n in os.listdir(index_dir))
        real = {'status': 'ok', **{k: ours[k]['median'] for k in ('first_batch_s', 'epoch_s',
                                                                   'fetched_ratio')}}
        real['refetched_share'] = max(0.0, real['fetched_ratio'] - 1.0)
        shares = delivered_profiles(saved.get('link', 'kernel'))
        results.append({'name': config.name, 'measured': real,
                        'predicted': predict(index_dir, config, machine, shares, total)})
        notes.append(f'{name} ({saved["date"]}, load {saved["load"][0]:.1f})')
    return ', '.join(notes), results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--timeout', type=float, default=240)
    parser.add_argument('--link', choices=['auto', 'kernel', 'proxy'], default='auto')
    parser.add_argument('--data-dir', default=os.path.join(REPO, 'benchmarks', '.data', 'link'))
    parser.add_argument('--out', default=RESULTS)
    parser.add_argument('--docs', action='store_true', help=f'write the table into {DOCS}')
    parser.add_argument('--only-big-plan', action='store_true',
                        help='only time the plan of a 1 B-sample dataset')
    parser.add_argument('--no-fleet', action='store_true', help='leave the fleet row out')
    parser.add_argument('--only-fleet', action='store_true',
                        help='only the fleet row (its uncapped and throttled epochs)')
    parser.add_argument('--against-saved', action='store_true',
                        help='no runs: plan (default machine costs) beside link_bench\'s saved '
                             'runs of the same cases')
    args = parser.parse_args(argv)
    if args.against_saved:
        samples, shard_bytes = DATASETS['images']
        index_dir = os.path.join(args.data_dir, OURS, f'images-{shard_bytes}')
        where, saved = against_saved(index_dir)
        print(f'The plan with its default machine costs beside link_bench\'s saved runs '
              f'(medians; {where}):\n\n' + table(saved))
        return
    if args.only_fleet:
        fleet = [fleet_row(c, args.repeats, args.data_dir) for c in CONFIGS if c.nodes > 1]
        path = args.out.replace('.json', '-fleet.json')
        with open(path, 'w') as f:
            json.dump({'date': time.strftime('%Y-%m-%d %H:%M'), 'load': os.getloadavg(),
                       'results': fleet}, f, indent=1, default=str)
        print(f'(load {os.getloadavg()}; {path})\n\n' + table(fleet))
        return
    big = time_big_plan()
    _log(f'streaming {" ".join(BIG_PLAN)}: {big["seconds"]:.1f} s (load {big["load"]})')
    if args.only_big_plan:
        return
    os.environ.setdefault('STREAMING_BENCH_SRC', REPO)  # Our workers run this checkout.
    os.environ.update({'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing'})
    python = pythons({OURS})
    samples, shard_bytes = DATASETS['images']
    dirs = prepare(args.data_dir, [OURS], python, 'images', shard_bytes)
    scratch = os.path.join(args.data_dir, 'scratch')
    payload = sources.Source(args.data_dir, 'images').total_payload_bytes() / samples
    base = {'bucket': 'plancal', 'scratch': scratch, 'batch_size': 32, 'num_workers': 2,
            'shuffle': True, 'payload_per_sample': payload}
    results: list[dict[str, Any]] = []
    with open_link(PROFILES['uncapped'], 'plancal', args.link) as link:
        _log(f'link emulator: {link.mode}')
        key = os.path.basename(dirs[OURS])
        total = link.upload_dir(dirs[OURS], f'{OURS}/{key}')
        params = {**base, 'prefix': f'{OURS}/{key}', 'cache_limit': None}
        startup_runs = []
        for _ in range(args.repeats):
            result = one_run(OURS, python[OURS], link, PROFILES['uncapped'].link_rate, total,
                             params, scratch, args.timeout)
            if result['status'] == 'ok':
                stats = link.stats(records=True)
                result['metrics']['build_s'] = build_seconds(result['metrics'], stats)
                result['metrics']['link'] = delivered_link(stats)
            startup_runs.append(result)
        machine = machine_costs(startup_runs, samples, base['num_workers'])
        links = [r['metrics']['link'] for r in startup_runs
                 if r['status'] == 'ok' and r['metrics']['link']]
        if links:
            machine['uncapped_link'] = {k: statistics.median(x[k] for x in links)
                                        for k in ('ttfb', 'conn_rate', 'link_rate')}
            machine['decode_upper_bound'] = machine['decode_s_per_sample']
            machine['decode_s_per_sample'] = single_node_reading_cost(dirs[OURS], machine,
                                                                      base['num_workers'])
        startup = machine['startup_s']
        _log(f'this machine: {machine}')
        shares = delivered_profiles(link.mode)
        for config in CONFIGS:
            if config.nodes > 1:
                continue  # The fleet row brings its own store and links (below).
            profile = PROFILES[config.profile]
            link.set_profile(profile)
            limit = None if config.cache_fraction is None else int(total * config.cache_fraction)
            run_params = {**params, 'cache_limit': limit}
            runs = [one_run(OURS, python[OURS], link, profile.link_rate, total, run_params,
                            scratch, args.timeout) for _ in range(args.repeats)]
            real = measured(runs, total)
            guess = predict(dirs[OURS], config, machine, shares, total)
            _log(f'{config.name}: measured {real}, planned {guess}')
            results.append({'name': config.name, 'measured': real, 'predicted': guess,
                            'runs': runs})
    for config in CONFIGS:
        if config.nodes > 1 and not args.no_fleet:
            results.append(fleet_row(config, args.repeats, args.data_dir))
    load = os.getloadavg()
    text = table(results)
    header = (f'`flock /work/bench.lock .venv/bin/python -m benchmarks.plan_calibration '
              f'--repeats {args.repeats} --docs` ({link.mode} link; run of '
              f'{time.strftime("%Y-%m-%d %H:%M")}, load average after: '
              f'{", ".join(f"{x:.1f}" for x in load)}; measured build {machine["build_s"]:.2f} s, '
              f'start-up {startup:.2f} s, '
              f'reading {machine["decode_s_per_sample"] * 1e3:.2f} ms per sample per worker; '
              f'medians of {args.repeats}). `streaming {" ".join(BIG_PLAN[:-1])}` (1 B samples) '
              f'answered in {big["seconds"]:.1f} s (load {big["load"][0]:.1f}).')
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump({'date': time.strftime('%Y-%m-%d %H:%M'), 'load': load, 'link': link.mode,
                   'machine': machine, 'shares': shares, 'big_plan': big, 'results': results},
                  f, indent=1, default=str)
    print(header + '\n\n' + text)
    if args.docs:
        write_docs(header + '\n\n' + text)


if __name__ == '__main__':
    main()
