"""The ``index`` shuffle: any position on its own, a bijection, local, and the same as a whole."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.order import get_shuffle
from streaming.order.resample import resample, whole_units
from streaming.order.shuffles import shuffle_positions
from streaming.order.shuffles.index import IndexOrder, feistel_permute


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 5000), seed=st.integers(0, 2**62))
def test_feistel_is_a_bijection_of_any_size(size: int, seed: int) -> None:
    keys = np.random.default_rng(seed).integers(0, 1 << 63, 4, dtype=np.int64).astype(np.uint64)
    got = feistel_permute(np.arange(size), np.full(size, size), np.tile(keys, (size, 1)))
    assert sorted(got.tolist()) == list(range(size))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 60), min_size=1, max_size=30), rows=st.integers(1, 6),
       block=st.integers(1, 200), seed=st.integers(0, 10**6), epoch=st.integers(0, 5))
def test_every_position_alone_agrees_with_the_whole_epoch(sizes, rows, block, seed,
                                                          epoch) -> None:
    whole = get_shuffle('index')(np.array(sizes), rows, seed, epoch, block)
    total = sum(sizes)
    assert sorted(whole.tolist()) == list(range(total))
    order = IndexOrder(np.array(sizes), rows, seed, epoch, block)
    if total:
        picks = np.random.default_rng(seed).integers(0, total, 50)
        assert np.array_equal(order.at(picks), whole[picks])


def test_new_each_epoch_and_seed_and_reproducible() -> None:
    sizes = np.full(40, 50)
    first = get_shuffle('index')(sizes, 2, 7, 0, 300)
    assert np.array_equal(first, get_shuffle('index')(sizes, 2, 7, 0, 300))
    assert not np.array_equal(first, get_shuffle('index')(sizes, 2, 7, 1, 300))
    assert not np.array_equal(first, get_shuffle('index')(sizes, 2, 8, 0, 300))


def test_rows_keep_their_shards_and_blocks_bound_the_shards_in_reach() -> None:
    sizes = np.full(200, 100)  # 20,000 samples, 200 shards
    block = 1000
    ids = get_shuffle('index')(sizes, 4, 3, 1, block)
    shards = ids // 100
    rows = [set(shards[r * 5000:(r + 1) * 5000].tolist()) for r in range(4)]
    assert sum(len(r) for r in rows) <= 200 + 3  # Only row-boundary shards are shared.
    # Any window of a block's length touches at most about two blocks' worth of shards.
    reach = [len(set(shards[i:i + block].tolist())) for i in range(0, 20000 - block, 250)]
    assert max(reach) <= 2 * (block // 100 + 1) + 1  # Two blocks, each cutting two shards.
    # And mixes: neighbours rarely come from the same shard.
    assert np.mean(shards[1:] == shards[:-1]) < 0.2


def test_py1e_locality_is_matched() -> None:
    """Distinct shards per 4,096 consecutive reads, index vs py1e, at the same block size."""
    sizes = np.full(500, 400)  # 200,000 samples
    block = 20_000
    counts = {}
    for algo in ('index', 'py1e'):
        shards = shuffle_positions(algo, sizes, 1, 5, 0, block) if algo == 'py1e' else \
            get_shuffle('index')(sizes, 1, 5, 0, block)
        shards = shards // 400
        counts[algo] = np.median([len(np.unique(shards[i:i + 4096]))
                                  for i in range(0, len(shards) - 4096, 4096)])
    assert counts['index'] <= counts['py1e'] * 1.1, counts


@pytest.mark.parametrize('choose,expect_lazy', [([300, 200], True), ([600, 0], True),
                                                ([300, 100], False), ([450, 400], False)])
def test_whole_units_are_resamples_units(choose, expect_lazy) -> None:
    sizes = np.array([100, 0, 120, 80, 150, 50])
    streams = np.array([0, 0, 0, 0, 1, 1])
    units = whole_units(sizes, streams, np.array(choose))
    assert (units is not None) == expect_lazy
    if units is None:
        return
    drawn = resample(sizes, streams, np.array(choose), seed=1, epoch=2,
                     sampling_method='balanced', sampling_granularity=1)
    assert np.array_equal(units[0], drawn.unit_sizes)
    small = drawn.small if drawn.small is not None else np.arange(drawn.num_samples)
    starts = np.concatenate([[0], np.cumsum(units[0])[:-1]])
    assert np.array_equal(small[starts], units[1])
