"""Stream weights (``apply_weights``) and per-shard draws (``draw_shards``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.order import apply_weights
from streaming.order.sampling import draw_shards

SIZES = np.array([10, 20, 30])


def test_relative_weights_are_normalised_over_the_total_by_default() -> None:
    # Values observed from the reference for the same inputs.
    assert apply_weights(SIZES, proportion=[0.5, 0.25, 0.25], seed=7).tolist() == [30, 15, 15]
    got = apply_weights(SIZES, proportion=[1, 1, 1], epoch_size=100, seed=7)
    assert sorted(got.tolist()) == [33, 33, 34]


def test_shares_are_truncated_float_products_as_in_the_reference() -> None:
    assert apply_weights(SIZES, proportion=[0.1, 0.2, 0.7], epoch_size=10,
                         seed=0).tolist() == [1, 2, 7]
    # 0.29 * 100 is 28.999999999999996 in float64: the reference takes 28, and so do we.
    assert apply_weights(np.array([100]), repeat=[0.29], seed=0).tolist() == [28]


@pytest.mark.parametrize('seed', range(6))
def test_the_rounding_shortfall_goes_one_each_to_distinct_streams(seed: int) -> None:
    got = apply_weights(np.array([10] * 7), proportion=[1] * 7, epoch_size=10, seed=seed)
    assert got.sum() == 10 and set(got.tolist()) == {1, 2}
    again = apply_weights(np.array([10] * 7), proportion=[1] * 7, epoch_size=10, seed=seed)
    assert np.array_equal(got, again)
    # As in the reference, any stream may get one, even one whose share was exact.
    split = apply_weights(np.array([1, 1, 2]), proportion=[1, 1, 2], epoch_size=10, seed=seed)
    assert split.sum() == 10 and (split - [2, 2, 5]).min() >= 0


def test_no_weights_with_epoch_size_is_proportional_to_stream_size() -> None:
    got = apply_weights(np.array([10, 20, 31]), epoch_size=50, seed=7)
    assert got.sum() == 50 and (got - [8, 16, 25]).tolist() in ([1, 0, 0], [0, 1, 0], [0, 0, 1])
    assert apply_weights(np.array([10, 20, 31]), epoch_size=61, seed=3).tolist() == [10, 20, 31]


def test_absolute_weights_sum_to_the_epoch() -> None:
    got = apply_weights(SIZES, repeat=[1.5, None, None], choose=[None, 7, None], seed=1)
    assert got.tolist() == [15, 7, 30]
    assert apply_weights(SIZES, seed=1).tolist() == [10, 20, 30]
    assert apply_weights(SIZES, proportion=[0, 1, 1], seed=2).tolist() == [0, 30, 30]


@pytest.mark.parametrize('kwargs,message', [
    ({'proportion': [1, None, 1]}, r'cannot be mixed: streams \[0, 2\].*streams \[1\]'),
    ({'proportion': [1, 1, 1], 'repeat': [None, 2, None]}, 'stream 1 has proportion and repeat'),
    ({'repeat': [1, None, None], 'epoch_size': 5}, r'epoch_size.*absolute.*streams \[0\]'),
    ({'proportion': [1, -1, 1]}, 'proportion` of stream 1 must be non-negative'),
    ({'repeat': [-0.5, None, None]}, 'repeat` of stream 0 must be non-negative'),
    ({'choose': [None, -3, None]}, 'choose` of stream 1 must be non-negative'),
    ({'choose': [None, 2.5, None]}, 'must be an int'),
    ({'proportion': [0, 0, 0]}, 'sum to zero'),
    ({'proportion': [1, 1]}, 'has 2 entries but there are 3 streams'),
    ({'epoch_size': -1}, 'epoch_size'),
])
def test_bad_weights_are_rejected_with_the_parameter_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_weights(SIZES, seed=0, **kwargs)


def _draw(choose, *, epoch=0, method='balanced', granularity=1, sizes=SIZES,
          streams=(0, 0, 1)):
    return draw_shards(np.array(sizes), np.array(streams), np.array(choose), seed=4, epoch=epoch,
                       sampling_method=method, sampling_granularity=granularity)


def _subsets(draw) -> list[list[int]]:
    return [draw.subset_offsets[draw.subset_starts[s]:draw.subset_starts[s + 1]].tolist()
            for s in range(len(draw.shard_sizes))]


def test_whole_repeats_then_a_sorted_random_subset_per_shard() -> None:
    draw = _draw([2 * 30 + 11, 30])  # stream 0 (30 samples) drawn 2 times plus 11
    assert draw.copies.tolist() == [2, 2, 1]
    assert draw.remainder[:2].sum() == 11 and draw.remainder[2] == 0
    for shard, subset in enumerate(_subsets(draw)):
        assert subset == sorted(set(subset)) and all(0 <= i < SIZES[shard] for i in subset)
        assert len(subset) == draw.remainder[shard]
    assert draw.total == 71 + 30


def test_balanced_draws_anew_each_epoch_and_fixed_does_not() -> None:
    balanced = [_subsets(_draw([17, 0], epoch=e)) for e in range(4)]
    fixed = [_subsets(_draw([17, 0], epoch=e, method='fixed')) for e in range(4)]
    assert len({str(s) for s in balanced}) > 1
    assert len({str(s) for s in fixed}) == 1


def test_granules_keep_partial_draws_in_runs() -> None:
    sizes = [20] * 10
    draw = _draw([73], granularity=5, sizes=sizes, streams=[0] * 10)
    assert draw.remainder.sum() == 73
    assert (draw.remainder % 5 != 0).sum() <= 1


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8),
       factor=st.floats(0, 3.5), granularity=st.integers(1, 7),
       method=st.sampled_from(['balanced', 'fixed']), epoch=st.integers(0, 3))
def test_draws_always_total_the_requested_count(sizes: list[int], factor: float,
                                                granularity: int, method: str,
                                                epoch: int) -> None:
    total = sum(sizes)
    wanted = int(total * factor) if total else 0
    draw = _draw([wanted], sizes=sizes, streams=[0] * len(sizes), method=method,
                 granularity=granularity, epoch=epoch)
    assert draw.total == wanted
    assert (draw.remainder < np.maximum(draw.shard_sizes, 1)).all()
    per_shard = draw.copies * draw.shard_sizes + draw.remainder
    assert (per_shard >= (draw.copies.min() if total else 0) * draw.shard_sizes).all()


def test_drawing_from_an_empty_stream_is_an_error() -> None:
    with pytest.raises(ValueError, match='stream 1 has no samples'):
        _draw([5, 3], sizes=[10, 0], streams=[0, 1])
    with pytest.raises(ValueError, match='sampling_method'):
        _draw([5, 0], method='random')
    with pytest.raises(ValueError, match='sampling_granularity'):
        _draw([5, 0], granularity=0)
