"""First use of each shard by a node: checked against a plain loop over every sample."""

import numpy as np
import pytest

from streaming.order import get_epoch_order
from streaming.order.first_use import first_uses, iter_first_uses, last_uses, sample_time


def brute_force(order, starts, from_time=0):
    ranks, workers, batches, batch = order.shape
    first = {}
    for r in range(ranks):
        for w in range(workers):
            for b in range(batches):
                for s in range(batch):
                    sample = int(order[r, w, b, s])
                    time = sample_time(b * batch + s, w, workers, batch)
                    if sample < 0 or time < from_time:
                        continue
                    shard = int(np.searchsorted(starts, sample, 'right') - 1)
                    first[shard] = min(first.get(shard, (time, r)), (time, r))
    # Ranks read at the same pace: equal times go in rank order.
    return [(shard, key[0]) for shard, key in sorted(first.items(), key=lambda kv: kv[1])]


def walk(order, starts, from_time=0, chunk=64):
    parts = list(iter_first_uses(order, starts, len(starts) - 1, from_time, chunk))
    shards = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, int)
    times = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, int)
    return shards, times


@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('from_time', [0, 37])
def test_matches_a_plain_loop(seed, from_time):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 20, 30)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    ranks, workers, batch = 2, 3, 4
    ids = rng.permutation(int(starts[-1]))
    batches = -(-len(ids) // (ranks * workers * batch))
    padded = np.full(ranks * workers * batches * batch, -1)
    padded[:len(ids)] = ids
    order = padded.reshape(ranks, workers, batches, batch)
    shards, times = walk(order, starts, from_time)
    expected = brute_force(order, starts, from_time)
    assert list(zip(shards.tolist(), times.tolist())) == [tuple(e) for e in expected]
    assert np.all(np.diff(times) >= 0)
    last = last_uses(order, starts, len(sizes), chunk=64)
    for shard in range(len(sizes)):
        uses = [sample_time(b * batch + s, w, workers, batch)
                for r in range(ranks) for w in range(workers) for b in range(batches)
                for s in range(batch)
                if starts[shard] <= order[r, w, b, s] < starts[shard + 1]]
        assert last[shard] == max(uses, default=-1)


def test_times_do_not_depend_on_the_number_of_workers():
    sizes = np.full(40, 25)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    params = dict(shard_sizes=sizes, shard_streams=np.zeros(40, np.int64),
                  stream_choose=np.array([1000]), epoch=0, seed=7, shuffle=True,
                  shuffle_algo='py1e', shuffle_block_size=200, num_canonical_nodes=1,
                  partition_algo='relaxed', num_physical_nodes=1, ranks_per_node=2,
                  batch_size=8, batching_method='random', sampling_method='balanced',
                  sampling_granularity=1, sample_in_epoch=0, initial_physical_nodes=None,
                  stream_proportions=None)
    walks = []
    for workers in (1, 2, 3):
        order = get_epoch_order(**params, workers_per_rank=workers)[0]
        walks.append(walk(order, starts, chunk=1 << 16))
    for shards, times in walks[1:]:
        assert shards.tolist() == walks[0][0].tolist()
        assert times.tolist() == walks[0][1].tolist()
    assert sorted(walks[0][0].tolist()) == list(range(40))


def test_first_uses_skips_seen_shards_and_padding():
    starts = np.array([0, 10, 20, 30])
    seen = np.array([False, True, False])
    shards, times = first_uses(np.array([25, -1, 12, 3, 27]), np.array([0, 1, 2, 3, 4]),
                               starts, seen)
    assert shards.tolist() == [2, 0] and times.tolist() == [0, 3]
    assert seen.all()
