"""``make_plan``: the dataset, the run and the link in; per node predictions and warnings out.

Big runs are sampled, and the result says so: past ``max_samples`` samples the epoch is planned
over the first shards of each stream (with the full dataset's block size and canonical nodes,
so the order is shaped alike) and the totals are scaled up by the ratio of samples; past
``max_nodes`` nodes, a few nodes are simulated (first, middle, last) and the run's totals scaled
from their mean. Nodes differ only in their order, so this is how far they need to be told apart.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from streaming.plan.fleet import simulate_draws
from streaming.plan.inputs import DatasetShape, RunSettings
from streaming.plan.orders import block_size_in_effect, canonical_nodes, epoch_orders, node_steps
from streaming.plan.profiles import LinkProfile
from streaming.plan.quality import shuffle_quality
from streaming.plan.simulate import MAX_DOWNLOADS, NodeRun

__all__ = ['make_plan']

SERIES_POINTS = 240
MIN_SHARDS_PER_NODE = 24


def _thin(points: list[tuple[float, float]], count: int = SERIES_POINTS) -> list[list[float]]:
    """At most ``count`` points of a step series (the last of each stretch, and the end)."""
    if len(points) <= count:
        return [[round(a, 4), round(b, 1)] for a, b in points]
    picks = np.linspace(0, len(points) - 1, count).astype(int)
    return [[round(points[i][0], 4), round(points[i][1], 1)] for i in picks]


def _throughput(run: NodeRun, scale: float, begin: float) -> list[list[float]]:
    """(seconds, samples/s) over equal stretches of time, from the first batch to the end."""
    times = np.asarray(run.step_times, np.float64)
    if len(times) < 2 or times[-1] <= times[0]:
        return []
    samples = np.cumsum(run.step_samples)
    edges = np.linspace(times[0], times[-1], SERIES_POINTS // 2 + 1)
    taken = np.searchsorted(times, edges, 'right')  # Steps taken by each edge.
    taken[0] = 0
    done = np.concatenate([[0], samples])[taken]
    width = (edges[1] - edges[0]) * scale
    return [[round(begin + (float(t) - begin) * scale, 3), round(float(count) / width, 1)]
            for t, count in zip(edges[1:], np.diff(done))]


def _peak_rate(times: list[float], window: float = 1.0) -> float:
    if not times:
        return 0.0
    stamps = np.sort(np.asarray(times))
    ends = np.searchsorted(stamps, stamps + window)
    return float((ends - np.arange(len(stamps))).max()) / window


def working_set(steps: Any, held: np.ndarray) -> int:
    """Peak bytes of the shards a node has started and not finished reading (first to last use)."""
    shards = steps.sample_shards
    count = shards.shape[0]
    rows = np.repeat(np.arange(count), shards.shape[1])
    flat = shards.reshape(-1)
    keep = flat >= 0
    first = np.full(len(held), count, np.int64)
    last = np.full(len(held), -1, np.int64)
    np.minimum.at(first, flat[keep], rows[keep])
    np.maximum.at(last, flat[keep], rows[keep])
    used = last >= 0
    live = np.zeros(count + 1)
    np.add.at(live, first[used], held[used])
    np.add.at(live, last[used] + 1, -held[used])
    return int(np.cumsum(live).max()) if count else 0


def _node_report(node: int, out: NodeRun, scale: float, node_bytes: int, begin: float,
                 run_epochs: int) -> dict[str, Any]:
    """One node's figures; a sampled run's times after ``begin`` (its first request) scale."""
    first = float(out.first_batch_s)
    sampled = scale
    if out.cut:  # Simulated in part: the rest goes at the pace of the shard reads done.
        scale /= out.progress

    def scaled(t: float) -> float:
        return begin + (t - begin) * scale if t > begin else t
    ends = [scaled(end) for end in out.epoch_end_s]
    if out.cut:
        per_epoch = (ends[-1] - begin) / run_epochs
        ends = [begin + per_epoch * (i + 1) for i in range(run_epochs)]
    epochs = [ends[0]] + [b - a for a, b in zip(ends[:-1], ends[1:])]
    samples = float(out.samples_planned if out.cut else sum(out.step_samples)) * \
        (sampled if out.cut else scale)
    steps = out.steps_planned * sampled if out.cut else len(out.step_times) * scale
    stalls = [seconds for _, seconds in out.stalls if seconds > 1e-3]
    first_wait = sum(seconds for step, seconds in out.stalls if step == 0)
    later_wait = sum(seconds for step, seconds in out.stalls if step > 0 and seconds > 1e-3)
    duration = ends[-1] if ends else 0.0
    mean_in_flight = out.in_flight_area / out.epoch_end_s[-1] if out.epoch_end_s else 0.0
    return {
        'node': node,
        'first_batch_s': round(float(first), 3),
        # Its own ranks' first batches, before the other nodes' (the same unless run together).
        'first_batch_ready_s': round(float(first if out.first_ready_s is None
                                           else min(first, out.first_ready_s)), 3),
        'epoch_s': [round(e, 3) for e in epochs],
        'run_s': round(duration, 3),
        'samples_per_s': round(samples / duration, 1) if duration else 0.0,
        'samples': int(round(samples)),
        'steps': int(round(steps)),
        'stalled_steps': int(round(len(stalls) * scale)),
        'stall_s': round(float(first_wait + later_wait * scale), 3),
        'longest_stall_s': round(max(stalls), 3) if stalls else 0.0,
        'fetched_bytes': int(round(out.fetched_bytes * scale)),
        'fetched_ratio': round(out.fetched_bytes / out.progress / node_bytes, 3)
        if node_bytes else 0.0,
        'refetches': int(round(out.refetches * scale)),
        'refetched_bytes': int(round(out.refetched_bytes * scale)),
        'gets': int(round(out.gets * scale)),
        'peak_get_rate': round(_peak_rate(out.get_times), 1),
        'throttled_gets': int(round(out.throttled * scale)),
        'max_in_flight': out.max_in_flight,
        'mean_in_flight': round(mean_in_flight, 1),
        'peak_cache_bytes': int(out.peak_cache),
        'cache_overflow_bytes': int(out.overfull),
        'series': {
            'throughput': _throughput(out, scale, begin),
            'bytes': _thin([(scaled(t), b * scale) for t, b in out.bytes_series]),
            'cache': _thin([(scaled(t), b) for t, b in out.cache_series]),
        },
    }


def _nodes_to_simulate(nodes: int, max_nodes: int) -> list[int]:
    if nodes <= max_nodes:
        return list(range(nodes))
    return sorted({0, nodes // 2, nodes - 1})[:max_nodes]


def make_plan(shape: DatasetShape, run: RunSettings, profile: LinkProfile, *,
              max_samples: int = 2_000_000, max_nodes: int = 4, in_flight: int | None = None,
              quality: bool = True, max_downloads: int = MAX_DOWNLOADS) -> dict[str, Any]:
    """Predict the run (see the module doc); returns a JSON-ready dict."""
    began = time.perf_counter()
    notes: list[str] = []
    block = block_size_in_effect(shape, run)
    planned = shape
    if shape.total_samples > max_samples:
        # Enough shards that each node still reads many (its steady state is what scales).
        keep = max(int(shape.num_shards * max_samples / shape.total_samples),
                   min(shape.num_shards, MIN_SHARDS_PER_NODE * run.nodes))
        planned = shape.subset(keep)
    scale = shape.total_samples / planned.total_samples
    if scale > 1:
        notes.append(f'sampled: simulated {planned.num_shards} of {shape.num_shards} shards '
                     f'({planned.total_samples} of {shape.total_samples} samples); times after the '
                     f'first request, bytes and GETs scaled by {scale:.1f}x')
    simulated = _nodes_to_simulate(run.nodes, max_nodes)
    if len(simulated) < run.nodes:
        notes.append(f'simulated nodes {simulated} of {run.nodes}; run totals are their mean '
                     f'times {run.nodes}')
    starts = np.concatenate([[0], np.cumsum(planned.samples)]).astype(np.int64)
    per_node: dict[int, list[Any]] = {node: [] for node in simulated}
    quality_result = None
    for epoch in range(run.epochs):
        orders = epoch_orders(planned, run, epoch, block)
        if epoch == 0 and quality:
            quality_result = shuffle_quality(orders, starts)
        for node in simulated:
            per_node[node].append(node_steps(orders[node], starts))
        del orders
    index_fetch = profile.ttfb + planned.index_bytes / profile.conn_rate
    if block < block_size_in_effect(shape, replace(run, cache_limit=None)):
        notes.append(f'shuffle_block_size capped at {block} samples by cache_limit (the '
                     f'dataset does the same, so that a block\'s shards fit)')
    node_reports = []
    streams = int(planned.streams.max()) + 1
    budget = max_downloads // len(simulated)  # The plan's bound, whatever the node count.
    runs, firsts, staircase = simulate_draws(planned, run, profile, per_node, index_fetch,
                                             in_flight, budget)
    if len(firsts) > 1:
        notes.append(f'throttling store: simulated over {len(firsts)} draws of the nodes\' '
                     f'start instants and the refused GETs\' retry jitter (the slowest '
                     f'node\'s first batch from {firsts[0]:.2f} to {firsts[-1]:.2f} s); the '
                     f'median draw shown')
    for node in simulated:
        out = runs[node]
        out.gets += streams
        node_bytes = int(planned.fetch_bytes[np.unique(np.concatenate(
            [steps.sample_shards[steps.sample_shards >= 0] for steps in per_node[node]]))].sum())
        if out.cut:
            notes.append(f'node {node}: cut after {out.downloads} downloads '
                         f'({len(out.step_times)} of {out.steps_planned} steps taken, '
                         f'{out.progress:.1%} of the shard reads done); the rest is '
                         f'extrapolated at their pace')
        node_reports.append(_node_report(node, out, scale, node_bytes, index_fetch, run.epochs))
    ws = working_set(per_node[simulated[0]][0], planned.held_bytes.astype(np.float64))
    mean = {key: float(np.mean([r[key] for r in node_reports]))
            for key in ('fetched_bytes', 'gets')}
    egress = mean['fetched_bytes'] * run.nodes
    gets = mean['gets'] * run.nodes
    run_s = max(r['run_s'] for r in node_reports)
    totals = {
        'egress_bytes': int(egress),
        'gets': int(gets),
        'egress_cost': round(egress / (1 << 30) * profile.price_per_gb, 4),
        'get_cost': round(gets / 1000 * profile.price_per_1k_gets, 4),
        'run_s': round(run_s, 3),
        'get_rate': round(gets / run_s, 1) if run_s else 0.0,
    }
    totals['cost'] = round(totals['egress_cost'] + totals['get_cost'], 4)
    result = {
        'dataset': {'source': shape.source, 'shards': shape.num_shards,
                    'samples': shape.total_samples, 'bytes': shape.total_bytes,
                    'held_bytes': int(shape.held_bytes.sum()),
                    'largest_shard_bytes': int(shape.held_bytes.max())},
        'run': {**run.to_dict(), 'num_canonical_nodes': canonical_nodes(run),
                'shuffle_block_size': block},
        'profile': profile.to_dict(),
        'sampled': scale > 1 or len(simulated) < run.nodes,
        'notes': notes,
        'nodes': node_reports,
        'totals': totals,
        'cache': {'limit': run.cache_limit, 'working_set_bytes': ws},
        'quality': quality_result,
        # Every draw's slowest first batch, sorted (one draw unless the store throttles).
        'draws_first_batch_s': [round(first, 3) for first in firsts],
        # The nodes' own first batches, fastest to slowest: each the median over the draws.
        'draws_nodes_first_batch_s': [round(first, 3) for first in staircase],
    }
    result['warnings'] = warnings_for(result, run, profile)
    result['planned_in_s'] = round(time.perf_counter() - began, 2)
    return result


def warnings_for(result: dict[str, Any], run: RunSettings, profile: LinkProfile) -> list[str]:
    """Plain sentences about what would hurt the run."""
    out = []
    worst = max(result['nodes'], key=lambda r: r['fetched_ratio'])
    if run.cache_bytes is not None and worst['refetches']:
        working = result['cache']['working_set_bytes']
        if run.cache_bytes < working:
            out.append(f'cache_limit below the working set: {worst["fetched_ratio"]:.2f}x egress '
                       f'(node {worst["node"]} downloads {worst["refetches"]} shards again; the '
                       f'working set is {working / 1e9:.2f} GB)')
        else:
            out.append(f'shards fetched again under cache_limit: {worst["fetched_ratio"]:.2f}x '
                       f'egress (node {worst["node"]}, {worst["refetches"]} shards), though the '
                       f'working set ({working / 1e9:.2f} GB) fits: evicted while still needed')
    if any(r['cache_overflow_bytes'] for r in result['nodes']):
        out.append('cache_limit too small for the shards in use at once: the cache must exceed '
                   'it (the dataset would fail with "cache_limit ... is too small")')
    if profile.request_limit and result['totals']['get_rate'] > 0:
        peak = max(r['peak_get_rate'] for r in result['nodes']) * run.nodes
        if peak > profile.request_limit:
            out.append(f'GETs peak at about {peak:.0f}/s over all nodes, above the store\'s '
                       f'{profile.request_limit:.0f}/s: requests are throttled')
    if run.step_seconds:
        stalled = max(r['stalled_steps'] / max(1, r['steps']) for r in result['nodes'])
        if stalled > 0.05:
            out.append(f'{stalled:.0%} of steps wait for data: the link cannot keep up with '
                       f'the model')
    return out
