"""The fleet row of ``benchmarks.plan_calibration``: a throttled store read by several nodes.

Run by the fleet emulator (``benchmarks.fleet.run_fleet``: its own dataset, moto store, per-node
links and request budget; every sample checked delivered exactly once): 4 emulated nodes, each
its own ``/dev/shm``, cache and link port (40 ms to first byte, 2 MB/s a connection, 4 MB/s a
node), one rank of 2 DataLoader workers, batch 8 per rank, every step ended by a barrier,
reading 240 shards of 256 KiB from one moto store that allows 16 GETs/s in all (the nodes
would ask 64 GETs/s). Each throttled epoch follows an epoch of the same fleet over an uncapped
link and store, which measures the fleet's start-up and reading cost under the same load, and
how its nodes begin: the spread of their first GETs and how far apart a node's first burst of
GETs reaches the store (``RunSettings.start_spread_s`` and ``send_gap_s``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks.linkemu import PROFILES
from benchmarks.plan_calibration_costs import (
    Config,
    fit_reading_cost,
    log,
    machine_costs,
    measured,
    ok_metrics,
)

FLEET_NODES, FLEET_RPS, FLEET_SHARDS = 4, 16.0, 240
FLEET_NAME = (f'throttled store ({FLEET_RPS:.0f} GETs/s), {FLEET_NODES} nodes, fleet link '
              f'(4 MB/s a node)')
FLEET = Config(FLEET_NAME, 'fleet', nodes=FLEET_NODES, request_limit=FLEET_RPS)


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

    First batch and epoch: the slowest rank's, from before its dataset is built (the first step
    is taken once every rank has its batch). Fetched: every node's bytes over the dataset's.
    Fetched again: each node's bytes beyond the index and the shards its own ranks read (from
    their logs of sample ids), over the dataset's.
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
            'ranks_first_batch_s': sorted(r['time_to_first_batch_s'] for r in ranks.values()),
            'epoch_s': max(r['total_s'] for r in ranks.values()),
            'fetched_ratio': fetched / total, 'refetched_share': again / total,
            'throttled': report['total']['throttled'], 'gets': report['total']['gets'],
            'first_shard_get_spread_s': report['total']['first_shard_get_spread_s'],
            'send_gap_s': statistics.median(n['first_gets_gap_s']
                                            for n in report['phase1']['nodes']),
            'exactly_once': report['exactly_once']['ok'],
            # The rate a node's link carried while it was busy (the uncapped runs' store).
            'link_rate': statistics.median(n['bytes'] / n['busy_span_s'] for n in
                                           report['phase1']['nodes'] if n['busy_span_s'] > 0),
            'samples_per_node': report['samples_in_epoch'] / len(ranks)}


def one_fleet_epoch(config: Config, data_dir: str, uncapped: bool) -> dict[str, Any]:
    """One fleet epoch (``benchmarks.fleet.run_fleet``); its dataset is kept for the plan."""
    from benchmarks.fleet import run_fleet
    kind = 'uncapped' if uncapped else 'throttled'
    work = os.path.join(data_dir, f'fleet-{kind}')
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        report = run_fleet(fleet_config(config, uncapped), work)
    except Exception as error:  # noqa: BLE001 (a failed run is reported, not fatal)
        return {'status': 'failed', 'reason': f'{type(error).__name__}: {error}'}
    source = os.path.join(work, 'source')
    total = sum(os.path.getsize(os.path.join(source, n)) for n in os.listdir(source))
    metrics = fleet_metrics(report, work, total)
    if not metrics['exactly_once']:
        return {'status': 'failed', 'reason': 'a sample was lost or delivered twice'}
    log(f'fleet epoch ({kind}): {metrics}')
    kept = os.path.join(data_dir, 'fleet-source')
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(source, kept)
    return {'status': 'ok', 'metrics': metrics, 'total': total}


def fleet_machine(runs: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """The fleet's start-up and reading cost on this machine, from its uncapped epochs."""
    from streaming.plan import RunSettings
    # A rank's clock starts once it joined the process group; its dataset's build is then the
    # plan's default (the start-up measured here covers it).
    ok = [{**r, 'metrics': {**r['metrics'], 'build_s': RunSettings().build_s}} for r in runs
          if r['status'] == 'ok']
    machine: dict[str, Any] = machine_costs(ok, int(ok[0]['metrics']['samples_per_node'])
                                            if ok else 0, workers)
    metrics = ok_metrics(ok)
    machine['uncapped_link_rate'] = statistics.median(m['link_rate'] for m in metrics)
    # How the nodes begin: the spread of their first shard GETs (the range of n draws in
    # [0, S] is S (n - 1) / (n + 1) on average, so S is the measured range scaled back), and
    # how far apart a node's first burst of GETs reaches the store.
    nodes = FLEET_NODES
    machine['start_spread_s'] = statistics.median(
        m['first_shard_get_spread_s'] for m in metrics) * (nodes + 1) / (nodes - 1)
    machine['send_gap_s'] = statistics.median(m['send_gap_s'] for m in metrics)
    return machine


def predict_fleet(index_dir: str, config: Config, machine: dict[str, Any], total: int,
                  profile: Any = None) -> dict[str, Any]:
    """The plan of the fleet row: its dataset, link, store limit and nodes (or ``profile``)."""
    from streaming.plan import DatasetShape, LinkProfile, RunSettings, plan
    fleet = fleet_config(config)
    shape = DatasetShape.from_urls([index_dir])
    profile = profile or LinkProfile(fleet.ttfb, fleet.conn_rate, fleet.link_rate,
                                     request_limit=fleet.allow_rps)
    run = RunSettings(nodes=fleet.nodes, ranks_per_node=fleet.ranks, workers=fleet.workers,
                      batch_size=fleet.batch_size, seed=17, build_s=machine['build_s'],
                      startup_s=machine['startup_s'],
                      decode_s_per_sample=machine['decode_s_per_sample'],
                      start_spread_s=machine.get('start_spread_s', 0.0),
                      send_gap_s=machine.get('send_gap_s', 0.0))
    result = plan(shape, run, profile, quality=False, find_min_cache=False)
    nodes = result['nodes']
    fetched = sum(n['fetched_bytes'] for n in nodes) + shape.index_bytes * len(nodes)
    return {'first_batch_s': max(n['first_batch_s'] for n in nodes),
            # Each the median over the plan's draws, as the measured are over the epochs.
            'ranks_first_batch_s': result['draws_nodes_first_batch_s'],
            'epoch_s': max(n['epoch_s'][0] for n in nodes),
            'fetched_ratio': fetched / total,
            'refetched_share': sum(n['refetched_bytes'] for n in nodes) / total,
            'throttled': sum(n['throttled_gets'] for n in nodes),
            'gets': sum(n['gets'] for n in nodes),
            'draws_first_batch_s': result['draws_first_batch_s']}


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
    """The fleet row: uncapped and throttled epochs in turn, the throttled beside their plan."""
    uncapped, runs = [], []
    for _ in range(repeats):
        uncapped.append(one_fleet_epoch(config, data_dir, uncapped=True))
        runs.append(one_fleet_epoch(config, data_dir, uncapped=False))
    real = measured(runs)
    ok = [r for r in runs if r['status'] == 'ok']
    if not ok or not ok_metrics(uncapped):
        return {'name': config.name, 'measured': real, 'runs': runs, 'uncapped': uncapped}
    machine = fleet_machine(uncapped, 2)
    index_dir = os.path.join(data_dir, 'fleet-source')
    machine['decode_upper_bound'] = machine['decode_s_per_sample']
    machine['decode_s_per_sample'] = fleet_reading_cost(index_dir, config, machine,
                                                        ok[0]['total'])
    log(f'the fleet on this machine: {machine}')
    real['ranks_first_batch_s'] = [statistics.median(r['metrics']['ranks_first_batch_s'][i]
                                                     for r in ok) for i in range(config.nodes)]
    guess = predict_fleet(index_dir, config, machine, ok[0]['total'])
    row = with_mean_first_batch({'name': config.name, 'measured': real, 'predicted': guess,
                                 'runs': runs, 'uncapped': uncapped, 'machine': machine})
    log(f'{config.name}: measured {real}, planned {guess}')
    return row


def with_mean_first_batch(row: dict[str, Any]) -> dict[str, Any]:
    """The row's first batch as the mean of its epochs and of the plan's draws.

    The slowest node's first batch spreads over twice its least from epoch to epoch, in two
    clusters (which node the store starves), so a median of a few epochs lands in either and
    moves by a quarter from run to run, where the mean moves by a few percent (docs/plan.md,
    Calibration). The medians are kept beside (``first_batch_median_s``).
    """
    real, guess = row['measured'], row['predicted']
    real['first_batch_median_s'] = real.get('first_batch_median_s', real['first_batch_s'])
    real['first_batch_s'] = statistics.mean(m['first_batch_s'] for m in ok_metrics(row['runs']))
    guess['first_batch_median_s'] = guess.get('first_batch_median_s', guess['first_batch_s'])
    guess['first_batch_s'] = round(statistics.mean(guess['draws_first_batch_s']), 3)
    return row
