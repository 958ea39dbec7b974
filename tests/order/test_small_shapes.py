"""The small-world fast paths give exactly what the general paths give.

``Dealing.full`` fills whole batch rounds of every rank at once and, for a short epoch, reads
positions from the rows' read order (``_READ_ORDER_MAX``); ``py1e`` shuffles a short row whole
(``_SMALL_ROW``). Each is checked against the per-worker, per-slot arithmetic and the windowed
row shuffle it replaces on small worlds (the reference-order oracle tests check both against
the reference).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from streaming.order import partition
from streaming.order.partition import Dealing
from streaming.order.shuffles import py1e, shuffle_positions

SHAPES = list(itertools.product(
    ['orig', 'relaxed'], [7, 100, 1001], [1, 4, 6], [1, 2, 3], [1, 3], [1, 2], [1, 4],
    [0, 37], [None, 2]))


def _per_worker(deal: Dealing) -> np.ndarray:
    out = np.empty(deal.shape, np.int64).reshape(deal.shape[:3] + (-1,))
    for node, rank, worker in np.ndindex(*deal.shape[:3]):
        out[node, rank, worker] = deal.positions(node, rank, worker)
    return out.reshape(deal.shape)


@pytest.mark.filterwarnings('ignore')  # Fewer samples than canonical nodes warns (not tested).
def test_whole_array_dealing_equals_the_per_slot_arithmetic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fast, checked = {}, 0
    for shape in SHAPES:
        try:
            fast[shape] = Dealing(*shape).full()
        except ValueError:
            continue
    monkeypatch.setattr(partition, '_READ_ORDER_MAX', 0)
    for chunk in (1 << 22, 5):  # Whole and in many chunks.
        monkeypatch.setattr(partition, '_CHUNK', chunk)
        for shape, got in fast.items():
            deal = Dealing(*shape)
            assert np.array_equal(got, _per_worker(deal)), shape
            assert np.array_equal(got, deal.full()), shape
            checked += 1
    assert checked > 300


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_short_py1e_rows_shuffle_as_the_windowed_rows_do(monkeypatch: pytest.MonkeyPatch,
                                                         seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(40):
        sizes = rng.integers(0, 400, int(rng.integers(1, 20)))
        canonical = int(rng.integers(1, 60))
        block = int(rng.choice([2, 7, 100, 1 << 18]))
        monkeypatch.setattr(py1e, '_SMALL_ROW', 1 << 16)
        whole = shuffle_positions('py1e', sizes, canonical, seed, 1, block)
        monkeypatch.setattr(py1e, '_SMALL_ROW', -1)
        windowed = shuffle_positions('py1e', sizes, canonical, seed, 1, block)
        assert whole.dtype == windowed.dtype
        assert np.array_equal(whole, windowed), (sizes, canonical, block)
