"""Stream weights (``apply_weights``); per-shard draws are ``resample``'s (test_oracle_order)."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.order import apply_weights

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
