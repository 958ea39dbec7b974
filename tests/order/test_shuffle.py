"""Shuffle algorithms: valid, deterministic, new each epoch, node-local, and shaped as described."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.order import default_shuffle_block_size, shuffle_block_size_in_effect
from tests.order.helpers import SHUFFLED_ALGOS, one_stream, order, shard_of, stream_order

ALL_ALGOS = (*SHUFFLED_ALGOS, 'naive')
DATA = one_stream([25] * 16)  # 400 samples


def flat(epoch_order: np.ndarray) -> np.ndarray:
    stream = stream_order(epoch_order)
    return stream[stream >= 0]


@pytest.mark.parametrize('algo', ALL_ALGOS)
def test_shuffle_is_a_permutation_deterministic_and_new_each_epoch(algo: str) -> None:
    epochs = [flat(order(DATA, shuffle_algo=algo, epoch=epoch, num_canonical_nodes=4))
              for epoch in range(3)]
    for got in epochs:
        assert sorted(got.tolist()) == list(range(400))
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])
    again = flat(order(DATA, shuffle_algo=algo, epoch=1, num_canonical_nodes=4))
    assert np.array_equal(again, epochs[1])
    other_seed = flat(order(DATA, shuffle_algo=algo, epoch=1, seed=12, num_canonical_nodes=4))
    assert not np.array_equal(other_seed, epochs[1])


def test_seed_and_epoch_do_not_alias() -> None:
    """Unlike ``seed + epoch``, (seed 1, epoch 0) and (seed 0, epoch 1) differ."""
    first = flat(order(DATA, seed=1, epoch=0))
    second = flat(order(DATA, seed=0, epoch=1))
    assert not np.array_equal(first, second)


def test_no_shuffle_reads_each_shard_with_its_repeats_in_order() -> None:
    data = one_stream([3, 4, 5])
    data['stream_choose'] = np.array([24 + 5])  # twice, plus 5 more
    got = flat(order(data, shuffle=False, num_canonical_nodes=1, seed=3)).tolist()
    shards = [list(range(0, 3)), list(range(3, 7)), list(range(7, 12))]
    position = 0
    for shard in shards:  # as the reference: a shard's two copies, then its partial draw
        assert got[position:position + 2 * len(shard)] == shard * 2
        position += 2 * len(shard)
        partial = [i for i in got[position:] if i in shard]
        assert partial == sorted(partial)
        position += len(partial)
    assert position == 29


def _node_shards(epoch_order: np.ndarray, sizes: np.ndarray) -> list[set]:
    return [set(shard_of(part[part >= 0], sizes).tolist()) for part in epoch_order]


@pytest.mark.parametrize('algo', SHUFFLED_ALGOS)
@pytest.mark.parametrize('repeat', [1])
def test_canonical_nodes_keep_disjoint_shards_when_rows_end_on_shard_edges(algo: str,
                                                                           repeat: int) -> None:
    """16 shards of 25 over 4 canonical nodes: each node owns 4 whole shards, every epoch.

    (With repeats the reference shuffles each copy of a shard on its own, so copies of one
    shard may go to different canonical nodes; we do as it does.)"""
    sizes = DATA['shard_sizes']
    data = dict(DATA, stream_choose=DATA['stream_choose'] * repeat)
    owners = None
    for epoch in range(3):
        got = order(data, shuffle_algo=algo, epoch=epoch, num_canonical_nodes=4,
                    num_physical_nodes=4, ranks_per_node=2, batch_size=2)
        assert np.bincount(got[got >= 0]).tolist() == [repeat] * 400
        shards = _node_shards(got, sizes)
        assert [len(s) for s in shards] == [4, 4, 4, 4]
        assert len(set.union(*shards)) == 16
        owners = owners or shards
        assert shards == owners  # the same node keeps the same shards across epochs


@pytest.mark.parametrize('algo', SHUFFLED_ALGOS)
@pytest.mark.parametrize('canonical,nodes', [(6, 6), (6, 3), (6, 2), (8, 4)])
def test_only_row_boundary_shards_are_shared_between_canonical_nodes(
        algo: str, canonical: int, nodes: int) -> None:
    """Uneven shards: a shard cut by a row boundary is read by the two nodes owning its halves;
    every other shard is read by exactly one node."""
    data = one_stream([17, 31, 9, 23, 40, 12, 27, 8, 35, 19, 22, 14, 30, 11, 26, 16])
    sizes = data['shard_sizes']
    got = order(data, shuffle_algo=algo, num_canonical_nodes=canonical, num_physical_nodes=nodes,
                batch_size=3)
    shards = _node_shards(got, sizes)
    readers = np.zeros(len(sizes), int)
    for node_shards in shards:
        readers[list(node_shards)] += 1
    assert readers.max() <= 2
    assert (readers == 2).sum() <= canonical - 1


def test_naive_ignores_canonical_nodes() -> None:
    got = order(DATA, shuffle_algo='naive', num_canonical_nodes=4, num_physical_nodes=4,
                batch_size=5)
    assert all(len(s) > 8 for s in _node_shards(got, DATA['shard_sizes']))


def test_py1s_keeps_each_shard_contiguous() -> None:
    got = flat(order(DATA, shuffle_algo='py1s', num_canonical_nodes=1))
    runs = shard_of(got, DATA['shard_sizes'])
    assert (np.diff(runs) != 0).sum() == 15  # 16 shards, each one run
    assert not np.array_equal(got, np.sort(got))


@pytest.mark.parametrize('algo,contiguous', [('py1s', True), ('py2s', False)])
def test_a_shard_cut_between_nodes_splits_into_ranges_or_random_halves(algo: str,
                                                                     contiguous: bool) -> None:
    data = one_stream([30, 30, 30])  # 2 rows of 45: the shard in the middle is cut in two
    stream = flat(order(data, shuffle_algo=algo, num_canonical_nodes=2, batch_size=2))
    rows = [stream[0::2], stream[1::2]]
    shards = [set(shard_of(row, data['shard_sizes']).tolist()) for row in rows]
    (cut,) = shards[0] & shards[1]
    for row in rows:
        half = np.sort(row[shard_of(row, data['shard_sizes']) == cut])
        assert np.array_equal(half, np.arange(half[0], half[0] + len(half))) == contiguous


@pytest.mark.parametrize('algo,reach', [('py1b', 2), ('py1br', 3)])
def test_block_shuffles_keep_a_shard_within_a_few_blocks(algo: str, reach: int) -> None:
    data = one_stream([10] * 40)
    got = flat(order(data, shuffle_algo=algo, shuffle_block_size=40, num_canonical_nodes=1))
    shards = shard_of(got, data['shard_sizes'])
    for shard in range(40):
        where = np.flatnonzero(shards == shard)
        assert where.max() - where.min() < reach * 40 * 1.25 + 10


def test_py1e_spreads_a_shard_over_about_one_block() -> None:
    data = one_stream([10] * 200)
    block = 100
    got = flat(order(data, shuffle_algo='py1e', shuffle_block_size=block, num_canonical_nodes=1))
    shards = shard_of(got, data['shard_sizes'])
    spreads = [np.ptp(np.flatnonzero(shards == shard)) for shard in range(200)]
    assert max(spreads) <= 1.25 * block + 30
    assert np.median(spreads) > 0.5 * block  # really spread, not kept together


def test_default_block_size_matches_the_reference() -> None:
    assert default_shuffle_block_size(1) == 4_000_000
    assert default_shuffle_block_size(64) == 1 << 18
    # A given size is used as given; None (not given) gets the default for the node count.
    assert shuffle_block_size_in_effect(None, 64) == 1 << 18
    assert shuffle_block_size_in_effect(None, 2) == 2_000_000
    assert shuffle_block_size_in_effect(100, 2) == 100
