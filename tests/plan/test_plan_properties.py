"""Properties every plan keeps, over many small random runs (a seeded loop, the same each time).

Whatever the world (nodes, ranks, workers), batch and shard sizes, streams, shuffle, cache
limit, lookahead and link, the simulation must finish (never "stalled", never a bug error), the
nodes together take every sample of every epoch's real order, each node fetches at least the
bytes of the shards its order reads, and with no cache limit nothing is fetched twice.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from streaming.order import apply_weights, get_epoch_order
from streaming.plan import DatasetShape, RunSettings, get_profile
from streaming.plan.core import make_plan
from streaming.plan.orders import block_size_in_effect, canonical_nodes

CASES = 48
ALGOS = ('naive', 'py1b', 'py1br', 'py1e', 'py1s', 'py2s')
PROFILES = ('same-region', 'cross-region', 'internet', 'throttled')


def _shape(rng: random.Random) -> DatasetShape:
    """One to three streams of shards of uneven sizes (some of a single sample)."""
    indexes = []
    for stream in range(rng.randint(1, 3)):
        shards = []
        for _ in range(rng.randint(1, 12)):
            # Now and then a long shard: thousands of steps at a small batch.
            samples = rng.choice((1, rng.randint(2, 40), rng.randint(40, 300),
                                  rng.randint(2000, 8000)))
            size = samples * rng.randint(100, 20_000 if samples < 1000 else 200)
            shards.append({'samples': samples, 'raw_data': {'bytes': size},
                           'zip_data': {'bytes': max(1, size // rng.choice((1, 1, 3)))}})
        indexes.append((f'stream{stream}', {'shards': shards}, 300))
    return DatasetShape.from_indexes(indexes)


def _run(rng: random.Random, shape: DatasetShape) -> RunSettings:
    streams = int(shape.streams.max()) + 1
    held = shape.held_bytes
    cache = rng.choice(('none', 'small', 'tiny'))
    cache_limit = None if cache == 'none' else int(
        shape.index_bytes + (0.25 * held.sum() if cache == 'small' else 1.5 * held.max()))
    nodes = rng.randint(1, 4)
    return RunSettings(
        nodes=nodes, ranks_per_node=rng.randint(1, 4), workers=rng.randint(0, 4),
        batch_size=rng.choice((1, 2, 7, 16, 64)), epochs=rng.randint(1, 2),
        shuffle=rng.random() < 0.85, shuffle_algo=rng.choice(ALGOS),
        shuffle_block_size=rng.choice((None, 2, 50, 1000)),
        num_canonical_nodes=rng.choice((None, nodes, 2 * nodes)), seed=rng.randint(0, 10_000),
        cache_limit=max(1, cache_limit) if cache_limit is not None else None,
        predownload=rng.choice((None, 0, 1, 8, 100)),
        proportions=[rng.uniform(0.2, 1.0) for _ in range(streams)]
        if streams > 1 and rng.random() < 0.5 else None,
        steps_per_s=rng.choice((None, None, 5.0, 200.0)), prefetch_factor=rng.randint(1, 3),
        decode_s_per_sample=rng.choice((0.0, 0.0, 1e-4)))


def _profile(name: str):
    if name == 'throttled':
        return get_profile('same-region').replace(request_limit=40.0)
    return get_profile(name)


def _orders(shape: DatasetShape, run: RunSettings) -> list[np.ndarray]:
    """Each epoch's ``(nodes, ranks, workers, batches, batch)`` order, from the order engine."""
    sizes = np.bincount(shape.streams, weights=shape.samples).astype(np.int64)
    choose = sizes if run.proportions is None else apply_weights(
        sizes, proportion=run.proportions, seed=run.seed)
    block = block_size_in_effect(shape, run)
    return [get_epoch_order(
        shard_sizes=shape.samples, shard_streams=shape.streams, stream_choose=choose,
        epoch=epoch, seed=run.seed, shuffle=run.shuffle, shuffle_algo=run.shuffle_algo,
        shuffle_block_size=block, num_canonical_nodes=canonical_nodes(run),
        num_physical_nodes=run.nodes, ranks_per_node=run.ranks_per_node,
        workers_per_rank=run.loader_workers, batch_size=run.batch_size)
        for epoch in range(run.epochs)]


@pytest.mark.parametrize('case', range(CASES))
def test_a_random_small_run_plans_and_adds_up(case: int) -> None:
    rng = random.Random(case)
    shape = _shape(rng)
    run = _run(rng, shape)
    profile = PROFILES[case % len(PROFILES)]
    what = f'case {case}: {run} over {shape.samples.tolist()} ({profile})'
    result = make_plan(shape, run, _profile(profile), quality=case % 4 == 0)
    assert not result['sampled'], what
    orders = _orders(shape, run)
    starts = np.concatenate([[0], np.cumsum(shape.samples)])
    taken = sum(int((order >= 0).sum()) for order in orders)
    assert sum(node['samples'] for node in result['nodes']) == taken, what
    for node in result['nodes']:
        ids = np.concatenate([order[node['node']].reshape(-1) for order in orders])
        needed = np.unique(np.searchsorted(starts, ids[ids >= 0], 'right') - 1)
        assert node['fetched_bytes'] >= int(shape.fetch_bytes[needed].sum()), what
        assert node['steps'] > 0 and len(node['epoch_s']) == run.epochs, what
        if run.cache_limit is None:
            assert node['refetches'] == 0 and node['refetched_bytes'] == 0, what
            assert node['fetched_bytes'] == int(shape.fetch_bytes[needed].sum()), what


def test_an_epoch_of_many_steps_without_a_model_pace_finishes() -> None:
    """Thousands of steps, one reader, no model pace: all happen at a few instants of the link.

    The simulation used to give up settling such an instant after a fixed number of rounds and
    then report "stalled" (``streaming plan --synthetic-samples 1m --workers 0``).
    """
    shape = DatasetShape.synthetic(6000, 1000, 2000)
    result = make_plan(shape, RunSettings(workers=0, batch_size=1), get_profile('same-region'),
                       quality=False)
    node = result['nodes'][0]
    assert node['steps'] == node['samples'] == 6000
    assert node['fetched_bytes'] == shape.total_bytes and node['refetches'] == 0
