"""The planner against measurement: ``streaming plan``'s predictions beside real epochs.

Each single-node configuration is run for real through the link emulator the way
``benchmarks.link_bench`` runs it (moto behind the kernel link, or the proxy where that cannot
be set up; the issue-19 ``images`` dataset, 3,000 samples of ~100 KB in ~74 shards of ~4 MB;
``StreamingDataset`` + ``StreamingDataLoader``, batch 32, 2 workers, shuffled, into an empty
cache; the clock starts before the dataset is built), and planned by ``streaming.plan`` from the
same index and settings. Compared: time to first batch, epoch time, bytes fetched, and bytes
fetched again (refetches, as a share of the dataset), medians over ``--repeats``.

What the plan is given besides the settings: the link as the emulator delivers it (just
before each compared epoch, ``linkemu_check.delivered_rates`` measures the share of the nominal
rates it carries on one connection and on many; medians) and this machine's costs
(``benchmarks/plan_calibration_costs.py``): each compared epoch follows an epoch of the same
shape (workers, cache settings) over the uncapped link, and a row's start-up and reading cost
come from its own uncapped epochs, so that a load that moves during the calibration moves both
alike. Nothing is taken from the compared epochs.

Configurations: one node cold epoch (same-region); ``cache_limit`` at 25% of the dataset;
a cross-region link; and a throttled store with several emulated nodes, run by the fleet
emulator (``benchmarks/plan_calibration_fleet.py``). ``--no-fleet`` and ``--only-fleet`` run
either part alone (each keeps its results file; ``--docs`` writes the table from both)::

    flock /work/bench.lock .venv/bin/python -m benchmarks.plan_calibration --repeats 3 --docs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.cases import sources
from benchmarks.config import OURS
from benchmarks.envs import pythons
from benchmarks.link_bench import DATASETS, one_run, prepare
from benchmarks.linkemu import PROFILES
from benchmarks.linkemu_check import delivered_rates
from benchmarks.linkemu_kernel import open_link
from benchmarks.plan_calibration_costs import (
    Config,
    describe,
    fit_reading_cost,
    log,
    machine_costs,
    measured,
    ok_metrics,
)
from benchmarks.plan_calibration_fleet import FLEET, fleet_row

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, 'benchmarks', 'results', 'plan-calibration.json')
FLEET_RESULTS = RESULTS.replace('.json', '-fleet.json')
DOCS = os.path.join(REPO, 'docs', 'plan.md')
BEGIN, END = '<!-- calibration table: begin -->', '<!-- calibration table: end -->'
TOLERANCE = 0.15
METRICS = ('first_batch_s', 'epoch_s', 'fetched_ratio', 'refetched_share')


CONFIGS = [
    Config('one node, cold epoch, same-region', 'same-region'),
    Config('cache_limit 25%, same-region', 'same-region', cache_fraction=0.25),
    Config('one node, cold epoch, cross-region', 'cross-region'),
    FLEET,
]
WORKERS, BATCH = 2, 32  # The single-node rows' loader.


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


def plan_one_node(index_dir: str, machine: dict[str, Any], profile: Any,
                  cache_limit: int | None) -> dict[str, Any]:
    """The plan of one node reading ``index_dir`` with the single-node rows' loader."""
    from streaming.plan import DatasetShape, RunSettings, plan
    run = RunSettings(workers=WORKERS, batch_size=BATCH, cache_limit=cache_limit,
                      build_s=machine['build_s'], startup_s=machine['startup_s'],
                      decode_s_per_sample=machine['decode_s_per_sample'])
    return plan(DatasetShape.from_urls([index_dir]), run, profile, quality=False,
                find_min_cache=False)['nodes'][0]


def cache_limit_of(config: Config, total: int) -> int | None:
    return None if config.cache_fraction is None else int(total * config.cache_fraction)


def predict(index_dir: str, config: Config, machine: dict[str, Any], shares: dict[str, Any],
            total: int) -> dict[str, float]:
    """The plan's figures for ``config`` (the same settings as the measured run)."""
    from streaming.plan import get_profile
    conn_share, link_share = shares.get(config.profile, (1.0, 1.0))
    preset = get_profile(config.profile)
    # The link holds a response until ``ttfb`` after its request, so a store slower to answer
    # than that (moto on this loaded machine) shows instead: the rate at which it began answers
    # over the uncapped link (``store_rate``).
    profile = preset.replace(conn_rate=preset.conn_rate * conn_share,
                             link_rate=preset.link_rate * link_share,
                             request_limit=config.request_limit,
                             store_rate=machine.get('uncapped_link', {}).get('store_rate'))
    node = plan_one_node(index_dir, machine, profile, cache_limit_of(config, total))
    return {'first_batch_s': node['first_batch_s'], 'epoch_s': node['epoch_s'][0],
            'fetched_ratio': node['fetched_bytes'] / total,
            'refetched_share': node['refetched_bytes'] / total}


def build_seconds(metrics: dict[str, Any], stats: dict[str, Any]) -> float:
    """Seconds from the start to the first shard's GET, less the index's GET (the dataset's
    build, after which the node's schedule starts), from the link's records of one run."""
    records = sorted(stats.get('records') or [], key=lambda r: r[0])
    if len(records) < 2:
        return 0.0
    index_end, first_shard = records[0][2], records[1][0]
    return max(0.0, metrics['first_request_s'] + first_shard - index_end)


def delivered_link(stats: dict[str, Any]) -> dict[str, float]:
    """The link as one run's GETs saw it (the link's records): median time to first byte,
    median rate of one transfer, bytes over the span something was arriving, and the rate at
    which the store began answers (``store_rate``)."""
    gets = [r for r in stats.get('records') or [] if r[4].startswith('GET') and r[3] > 0
            and r[2] > r[1]]
    if not gets:
        return {}
    span = max(r[2] for r in gets) - min(r[1] for r in gets)
    return {'ttfb': statistics.median(r[1] - r[0] for r in gets),
            'conn_rate': statistics.median(r[3] / (r[2] - r[1]) for r in gets),
            'link_rate': sum(r[3] for r in gets) / span if span > 0 else 1e12,
            'store_rate': store_rate([(r[0], r[1]) for r in gets])}


def store_rate(waits: list[tuple[float, float]]) -> float:
    """GETs the store began answering per second while it had some to answer: the GETs over
    the time at least one waited for its first byte (``waits``: request and first byte times).

    Over the uncapped link (no delay of its own) that waiting is the store's: a store that
    answers one GET after another at this rate keeps them waiting as long (``StoreQueue``).
    """
    busy, end = 0.0, float('-inf')
    for sent, first in sorted(waits):
        busy += max(0.0, first - max(sent, end))
        end = max(end, first)
    return len(waits) / busy if busy > 0 else float('inf')


def single_node_reading_cost(index_dir: str, machine: dict[str, Any],
                             cache_limit: int | None) -> float:
    """``fit_reading_cost`` for a single-node row (the uncapped link as its records saw it)."""
    from streaming.plan import LinkProfile
    link = machine['uncapped_link']  # No delay of its own: what waited, waited for the store.
    profile = LinkProfile(0.0, link['conn_rate'], link['link_rate'],
                          store_rate=link['store_rate'])
    return fit_reading_cost(
        lambda cost: plan_one_node(index_dir, {**machine, 'decode_s_per_sample': cost}, profile,
                                   cache_limit)['epoch_s'][0],
        machine['uncapped_epoch_s'], machine['decode_s_per_sample'])


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


def uncapped_epoch(link: Any, python: str, total: int, params: dict[str, Any], scratch: str,
                   timeout: float) -> dict[str, Any]:
    """One epoch over the uncapped link, with the link as its GETs saw it and its build time."""
    link.set_profile(PROFILES['uncapped'])
    result = one_run(OURS, python, link, PROFILES['uncapped'].link_rate, total, params, scratch,
                     timeout)
    if result['status'] == 'ok':
        stats = link.stats(records=True)
        result['metrics']['build_s'] = build_seconds(result['metrics'], stats)
        result['metrics']['link'] = delivered_link(stats)
    return result


def compared_epoch(link: Any, python: str, profile: Any, total: int, params: dict[str, Any],
                   scratch: str, timeout: float) -> dict[str, Any]:
    """One compared epoch, with its GETs' median time to first byte (the link's records)."""
    result = one_run(OURS, python, link, profile.link_rate, total, params, scratch, timeout)
    if result['status'] == 'ok':
        result['metrics']['median_ttfb_s'] = link.stats()['median_ttfb_s']
    return result


def row_machine(uncapped: list[dict[str, Any]], index_dir: str, samples: int,
                cache_limit: int | None) -> dict[str, Any]:
    """A single-node row's machine costs, from its own uncapped epochs."""
    machine: dict[str, Any] = machine_costs(uncapped, samples, WORKERS)
    links = [m['link'] for m in ok_metrics(uncapped) if m['link']]
    if links:
        machine['uncapped_link'] = {k: statistics.median(x[k] for x in links)
                                    for k in ('ttfb', 'conn_rate', 'link_rate', 'store_rate')}
        machine['decode_upper_bound'] = machine['decode_s_per_sample']
        machine['decode_s_per_sample'] = single_node_reading_cost(index_dir, machine,
                                                                  cache_limit)
    return machine


def single_node_rows(args: argparse.Namespace) -> dict[str, Any]:
    """The single-node rows: per row, an uncapped epoch and a compared one in turn."""
    os.environ.setdefault('STREAMING_BENCH_SRC', REPO)  # Our workers run this checkout.
    os.environ.update({'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing'})
    python = pythons({OURS})
    samples, shard_bytes = DATASETS['images']
    dirs = prepare(args.data_dir, [OURS], python, 'images', shard_bytes)
    scratch = os.path.join(args.data_dir, 'scratch')
    payload = sources.Source(args.data_dir, 'images').total_payload_bytes() / samples
    results: list[dict[str, Any]] = []
    with open_link(PROFILES['uncapped'], 'plancal', args.link) as link:
        log(f'link emulator: {link.mode}')
        key = os.path.basename(dirs[OURS])
        total = link.upload_dir(dirs[OURS], f'{OURS}/{key}')
        for config in CONFIGS:
            if config.nodes > 1:
                continue  # The fleet row brings its own store and links.
            profile = PROFILES[config.profile]
            limit = cache_limit_of(config, total)
            params = {'bucket': 'plancal', 'scratch': scratch, 'batch_size': BATCH,
                      'num_workers': WORKERS, 'shuffle': True, 'payload_per_sample': payload,
                      'prefix': f'{OURS}/{key}', 'cache_limit': limit}
            uncapped, runs, rates = [], [], []
            for _ in range(args.repeats):
                uncapped.append(uncapped_epoch(link, python[OURS], total, params, scratch,
                                               args.timeout))
                link.set_profile(profile)
                rates.append(delivered_rates(link, profile, 'plancal', seconds=1.0))
                runs.append(compared_epoch(link, python[OURS], profile, total, params, scratch,
                                           args.timeout))
            # The link as it carried data just before each compared epoch (the emulator's
            # share of its nominal rates moves with the machine's load).
            row_shares = {config.profile: (
                statistics.median(r['one_connection_mb_per_s'] for r in rates) * 1e6
                / profile.conn_rate,
                statistics.median(r['aggregate_mb_per_s'] for r in rates) * 1e6
                / profile.link_rate)}
            row: dict[str, Any] = {'name': config.name, 'measured': measured(runs),
                                   'runs': runs, 'uncapped': uncapped,
                                   'shares': row_shares[config.profile]}
            if ok_metrics(uncapped) and ok_metrics(runs):
                row['machine'] = row_machine(uncapped, dirs[OURS], samples, limit)
                row['predicted'] = predict(dirs[OURS], config, row['machine'], row_shares,
                                           total)
                log(f'{config.name}: machine {row["machine"]}, measured {row["measured"]}, '
                    f'planned {row["predicted"]}')
            results.append(row)
    return {'link': link.mode, 'results': results}


def command(args: argparse.Namespace) -> str:
    flags = ''.join(f' --{name}' for name in ('no-fleet', 'only-fleet')
                    if getattr(args, name.replace('-', '_')))
    if args.fleet_repeats != 5 and not args.no_fleet:
        flags += f' --fleet-repeats {args.fleet_repeats}'
    return (f'flock /work/bench.lock .venv/bin/python -m benchmarks.plan_calibration '
            f'--repeats {args.repeats}{flags} --docs')


def save(path: str, args: argparse.Namespace, part: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump({'command': command(args), 'date': time.strftime('%Y-%m-%d %H:%M'),
                   'load': os.getloadavg(), 'repeats': args.repeats, **part}, f, indent=1,
                  default=str)


def _link_note(row: dict[str, Any]) -> str:
    if 'shares' not in row:
        return ''
    one, many = row['shares']
    return (f'; the link carried {one:.2f} of its nominal rate on one connection and {many:.2f} '
            f'of its aggregate on many')


def _seconds(values: list[float]) -> str:
    return ', '.join(f'{x:.2f}' for x in values) + ' s'


def _run_note(part: dict[str, Any]) -> str:
    link = part.get('link', "the fleet emulator's")
    load = ', '.join(f'{x:.1f}' for x in part['load'])
    # The fleet's first batch is a mean (its epochs' spread has two clusters: see docs/plan.md).
    fleet = ', the first batch a mean' if 'link' not in part else ''
    return (f'`{part["command"]}` ({link} link; run of {part["date"]} UTC, load average after: '
            f'{load}; medians of {part["repeats"]}{fleet})')


def _draws(row: dict[str, Any]) -> str:
    """The spread of the slowest first batch: over the measured epochs and the plan's draws."""
    draws = row['predicted'].get('draws_first_batch_s') or []
    runs = sorted(m['first_batch_s'] for m in ok_metrics(row.get('runs', [])))
    if len(draws) < 2 or not runs:
        return ''
    means = ''
    if 'first_batch_median_s' in row['measured']:
        means = (f'; the table\'s first batch is the mean of the epochs and of the draws (the '
                 f'medians: measured {row["measured"]["first_batch_median_s"]:.2f} s, planned '
                 f'{row["predicted"]["first_batch_median_s"]:.2f} s)')
    return (f'; the slowest first batch of each epoch measured {_seconds(runs)}, over the '
            f'plan\'s {len(draws)} draws (the nodes\' starts, the retries\' jitter) '
            f'{draws[0]:.2f} to {draws[-1]:.2f} s (median {statistics.median(draws):.2f} s)'
            f'{means}')


def docs_text(paths: list[str]) -> str:
    """The calibration table and what it was measured with, from the saved results files."""
    parts = []
    for path in paths:
        if os.path.exists(path):
            with open(path) as f:
                parts.append(json.load(f))
    runs = [_run_note(p) for p in parts]
    rows = [row for p in parts for row in p['results']]
    costs = [f'- {row["name"]}: {describe(row["machine"])}{_link_note(row)}' for row in rows
             if 'machine' in row]
    spread = [f'- {row["name"]}: each node\'s own first batch, fastest to slowest (medians), '
              f'measured {_seconds(row["measured"]["ranks_first_batch_s"])}, planned '
              f'{_seconds(row["predicted"]["ranks_first_batch_s"])}{_draws(row)}' for row in rows
              if 'ranks_first_batch_s' in row.get('predicted', {})]
    big = [f'`streaming {" ".join(BIG_PLAN[:-1])}` (1 B samples) answered in '
           f'{p["big_plan"]["seconds"]:.1f} s (load {p["big_plan"]["load"][0]:.1f}).'
           for p in parts if 'big_plan' in p]
    return '\n\n'.join([' and '.join(runs) + '.', table(rows),
                         'Machine costs per row, from its own uncapped epochs (run in turn with '
                         'the compared ones):\n\n' + '\n'.join(costs + spread), *big])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--fleet-repeats', type=int, default=5,
                        help='the fleet row\'s epochs of each kind (its slowest node\'s first '
                             'batch spreads widely from epoch to epoch: which node the store '
                             'serves first)')
    parser.add_argument('--timeout', type=float, default=240)
    parser.add_argument('--link', choices=['auto', 'kernel', 'proxy'], default='auto')
    parser.add_argument('--data-dir', default=os.path.join(REPO, 'benchmarks', '.data', 'link'))
    parser.add_argument('--out', default=RESULTS, help='the single-node rows\' results (the '
                        'fleet row\'s go beside it, ending -fleet.json)')
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
    fleet_out = args.out.replace('.json', '-fleet.json')
    if args.against_saved:
        samples, shard_bytes = DATASETS['images']
        index_dir = os.path.join(args.data_dir, OURS, f'images-{shard_bytes}')
        where, saved = against_saved(index_dir)
        print(f'The plan with its default machine costs beside link_bench\'s saved runs '
              f'(medians; {where}):\n\n' + table(saved))
        return
    if not args.only_fleet:
        big = time_big_plan()
        log(f'streaming {" ".join(BIG_PLAN)}: {big["seconds"]:.1f} s (load {big["load"]})')
        if args.only_big_plan:
            return
        save(args.out, args, {**single_node_rows(args), 'big_plan': big})
    if not args.no_fleet:
        save(fleet_out, args, {'repeats': args.fleet_repeats,
                               'results': [fleet_row(c, args.fleet_repeats, args.data_dir)
                                           for c in CONFIGS if c.nodes > 1]})
    text = docs_text([args.out, fleet_out])
    print(text)
    if args.docs:
        write_docs(text)


if __name__ == '__main__':
    main()
