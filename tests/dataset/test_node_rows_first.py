"""A node's own canonical rows of a ``py1e`` order are computed first (issue 30, item 5).

Rows draw from one generator in turn, so node ``n``'s row used to wait for rows ``0..n-1`` to
be computed whole. Now the earlier rows' draws are made and thrown away, the node's row is
computed, then the rest: the same ids, the node's positions final first, and the file (written
out of order) checked and reused like any other.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming.coord import SharedDir
from streaming.dataset.checked_file import verify_checked
from streaming.dataset.order_store import shared_epoch_ids, wait_for_background
from streaming.order.ids import epoch_id_steps, epoch_sample_ids, final_ranges


def _inputs(rows: int, algo: str = 'py1e') -> dict:
    sizes = np.random.default_rng(5).integers(20, 90, 60).astype(np.int64)
    return dict(shard_sizes=sizes, shard_streams=np.zeros(len(sizes), np.int64),
                stream_choose=np.array([int(sizes.sum())]), epoch=2, seed=17, shuffle=True,
                shuffle_algo=algo, block_size=120, num_canonical_nodes=rows,
                sampling_method='balanced', sampling_granularity=1)


@pytest.mark.parametrize('rows', [2, 5, 8])
def test_every_start_gives_the_same_ids_and_its_row_first(rows) -> None:
    inputs = _inputs(rows)
    expected = epoch_sample_ids(**inputs)
    total = len(expected)
    for first in (0, total // rows, total // 2, total - 1):
        steps = epoch_id_steps(**inputs, first_position=first)
        ids = next(steps)
        parts = list(steps)
        assert np.array_equal(ids, expected)
        assert final_ranges(parts[-1]) == [(0, total)]
        covered = final_ranges(parts[0])
        assert len(covered) == 1
        begin, stop = covered[0]
        # The first part final is the start of the row holding ``first``, not of row 0.
        assert begin <= first < begin + total // rows + 1 or first == 0
        if first >= total // rows + 1:
            assert begin > 0 and stop > begin


def test_an_order_written_from_a_later_row_is_checked_and_reused(tmp_path) -> None:
    inputs = _inputs(4)
    expected = epoch_sample_ids(**inputs)
    cache = str(tmp_path / 'cache')
    shm = str(tmp_path / 'shm')
    os.makedirs(shm)
    first = len(expected) * 3 // 4
    got = shared_epoch_ids(SharedDir(shm), cache, inputs,
                           lambda: epoch_id_steps(**inputs, first_position=first))
    got.wait_positions(np.arange(first, first + 10))  # Its own row: no need for the others.
    assert np.array_equal(got.ids[first:first + 10], expected[first:first + 10])
    got.wait(len(got))
    assert np.array_equal(got.ids, expected)
    wait_for_background()
    path, = [os.path.join(cache, name) for name in os.listdir(cache) if name.endswith('.ids')]
    assert verify_checked(path, got.key, got._state.kind) == expected.nbytes  # Checksum right.

    def never() -> None:
        raise AssertionError('a valid cached order must not be computed again')

    os.makedirs(tmp_path / 'shm2')
    again = shared_epoch_ids(SharedDir(str(tmp_path / 'shm2')), cache, inputs, never)
    assert np.array_equal(again.ids, expected)
