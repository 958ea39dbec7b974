"""``streaming cost``'s cache model against a brute-force replay of the same sample order.

The estimate replays each node's shard accesses (from the pure order functions) through an LRU
cache of ``--cache-limit`` bytes, in the order a dataset with that ``cache_limit`` reads (its
shuffle block size capped so a block's shards fit). The brute force below walks every sample id
of every node one by one, in the order the node's devices read them (batch by batch, the
workers of a device in turn, all devices in step), finds its shard by a linear scan, and keeps
the cache as a plain list, most recently used last.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from streaming.cache.budget import samples_that_fit
from streaming.cli.cost import estimate
from streaming.order.plan import get_epoch_order
from streaming.order.shuffles import default_num_canonical_nodes, default_shuffle_block_size


def _shards(samples: list[int]) -> list[dict]:
    # Raw (what the cache holds) and compressed (what is downloaded) sizes that differ per shard.
    return [{'samples': n, 'raw_data': {'bytes': 1000 + 37 * k},
             'zip_data': {'bytes': 400 + 11 * k}} for k, n in enumerate(samples)]


def _args(**kwargs) -> argparse.Namespace:
    base = {'nodes': 1, 'ranks_per_node': 1, 'workers_per_rank': 1, 'batch_size': 4,
            'epochs': 3, 'cache_limit': None, 'shuffle': True, 'shuffle_algo': 'py1e',
            'shuffle_block_size': None, 'num_canonical_nodes': None, 'seed': 7,
            'price_per_gb': None}
    return argparse.Namespace(**{**base, **kwargs})


def brute_force(shards: list[dict], args: argparse.Namespace) -> list[int]:
    owner = [k for k, e in enumerate(shards) for _ in range(e['samples'])]
    fetched = [e['zip_data']['bytes'] for e in shards]
    held = [e['raw_data']['bytes'] for e in shards]
    limit = int(args.cache_limit) if args.cache_limit else None
    sizes = np.array([e['samples'] for e in shards], np.int64)
    ncn = args.num_canonical_nodes or default_num_canonical_nodes(args.shuffle_algo, args.nodes)
    # The block size a dataset uses under this limit: capped so a block's shards fit.
    block = args.shuffle_block_size or default_shuffle_block_size(ncn)
    peak = np.array([held[k] + fetched[k] for k in range(len(shards))], np.int64)
    cap = samples_that_fit(limit, peak, sizes)
    block = block if cap is None else min(block, cap)
    caches: list[list[int]] = [[] for _ in range(args.nodes)]
    per_epoch = []
    for epoch in range(args.epochs):
        order = get_epoch_order(
            shard_sizes=sizes, shard_streams=np.zeros(len(sizes), np.int64),
            stream_choose=np.array([sizes.sum()]), epoch=epoch, seed=args.seed,
            shuffle=args.shuffle, shuffle_algo=args.shuffle_algo,
            shuffle_block_size=block, num_canonical_nodes=ncn, num_physical_nodes=args.nodes,
            ranks_per_node=args.ranks_per_node,
            workers_per_rank=args.workers_per_rank, batch_size=args.batch_size)
        total = 0
        for node in range(args.nodes):
            cache = caches[node]
            ranks, workers, batches, batch = order[node].shape
            for b in range(batches):
                for w in range(workers):
                    for r in range(ranks):
                        for s in range(batch):
                            sample = int(order[node, r, w, b, s])
                            if sample < 0:
                                continue
                            shard = owner[sample]
                            if shard in cache:
                                cache.remove(shard)
                            else:
                                total += fetched[shard]
                            cache.append(shard)
                            while limit is not None and sum(held[c] for c in cache) > limit:
                                cache.pop(0)
        per_epoch.append(total)
    return per_epoch


CASES = [
    # (shard sample counts, settings)
    ([10] * 12, {'cache_limit': str(3 * 1500), 'shuffle': False}),
    ([7, 13, 5, 9, 11, 8, 6, 10, 12, 4], {'cache_limit': str(4 * 1400)}),
    ([7, 13, 5, 9, 11, 8, 6, 10, 12, 4], {'cache_limit': str(2 * 1400), 'nodes': 2,
                                          'ranks_per_node': 2, 'workers_per_rank': 2,
                                          'batch_size': 3, 'shuffle_algo': 'py1s',
                                          'num_canonical_nodes': 2}),
    ([16] * 9, {'cache_limit': str(2 * 1400), 'nodes': 2, 'ranks_per_node': 2,
                'workers_per_rank': 3, 'batch_size': 2, 'shuffle_algo': 'py1b',
                'shuffle_block_size': 20, 'num_canonical_nodes': 4}),
    ([9, 9, 9, 9, 9, 9], {'cache_limit': None, 'nodes': 3, 'ranks_per_node': 1,
                          'workers_per_rank': 2, 'batch_size': 2}),
]


@pytest.mark.parametrize('samples, settings', CASES)
def test_estimate_matches_a_brute_force_replay(samples, settings) -> None:
    shards = _shards(samples)
    args = _args(**settings)
    got = estimate(shards, args)
    expected = brute_force(shards, args)
    assert got['egress_per_epoch'] == expected
    assert got['egress_bytes'] == sum(expected)
    assert expected[0] > 0


def test_sequential_reads_through_a_small_lru_cache_miss_every_time() -> None:
    # In dataset order, an LRU cache smaller than the dataset has always just evicted the shard
    # read next: every epoch downloads everything; with room for every shard, only the first.
    shards = _shards([10] * 4)
    whole = sum(e['zip_data']['bytes'] for e in shards)
    held = sum(e['raw_data']['bytes'] for e in shards)
    small = estimate(shards, _args(shuffle=False, cache_limit=str(held - 1)))
    assert small['egress_per_epoch'] == [whole] * 3
    room = estimate(shards, _args(shuffle=False, cache_limit=str(held)))
    assert room['egress_per_epoch'] == [whole, 0, 0]
