"""py1e sorts a row a window of positions at a time; the result is one global sort's.

The oracle tests compare with the reference on epochs smaller than one window; these epochs
span several windows (and rows), checked against a plain version that draws every shift of a
row first and sorts the whole row at once.
"""

from __future__ import annotations

import numpy as np
import pytest

from streaming.order import memory
from streaming.order.shuffles import py1e, shuffle_positions
from streaming.order.shuffles import rows as spans


def _plain_py1e(sizes: np.ndarray, rows: int, seed: int, epoch: int, block: int) -> np.ndarray:
    run_rng, epoch_rng = np.random.default_rng(seed), np.random.default_rng(seed + epoch)
    begin = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    order = run_rng.permutation(len(sizes))
    cut = spans.permute_rows(spans.cut_rows(begin[order], sizes[order], rows), epoch_rng)
    ids = spans.ragged_arange(cut.begin, cut.length)
    out, start = [], 0
    for row in range(cut.num_rows):
        lengths = cut.length[cut.row(row)]
        row_ids = ids[start:start + int(lengths.sum())]
        start += len(row_ids)
        for offset, length in zip(np.cumsum(lengths) - lengths, lengths):
            if length > 1:
                epoch_rng.shuffle(row_ids[offset:offset + length])
        position = np.arange(len(row_ids), dtype=np.float64)
        offset = 0
        for length in lengths.tolist():
            window = int(epoch_rng.integers(int(0.75 * block), int(1.25 * block)))
            half = max((window - length) / 2, 0)
            low, high = max(-half, -offset), min(half, len(row_ids) - offset - length)
            position[offset:offset + length] += epoch_rng.uniform(low, high, length)
            offset += length
        out.append(row_ids[np.argsort(position, kind='stable')])
    return np.concatenate(out)


@pytest.mark.parametrize('rows,block', [(1, 3_000), (1, 900_000), (2, 200_000), (3, 40_000)])
def test_windowed_py1e_equals_one_sort_per_row(rows: int, block: int) -> None:
    rng = np.random.default_rng(rows * 7 + block)
    sizes = rng.integers(1, 3_000, 1_600)  # About 2.4M samples: 2-3 windows per row.
    want = _plain_py1e(sizes, rows, 17, 2, block)
    got = shuffle_positions('py1e', sizes, rows, 17, 2, block)
    assert np.array_equal(got, want)


def test_epoch_sized_arrays_live_in_their_own_map_and_hold_the_same_ids():
    """Arrays past the threshold come from a private anonymous map (no huge-page advice)."""
    import mmap

    def mapped(array: np.ndarray) -> bool:
        return isinstance(getattr(array.base, 'obj', None), mmap.mmap)

    assert not mapped(memory.fresh_array(1000, np.int32))
    count = memory._MAP_BYTES // 4 + 3
    big = memory.fresh_array(count, np.int32)
    assert mapped(big) and big.flags.writeable
    assert (len(big), big.dtype) == (count, np.int32)
    begin, length = np.array([7, 0, 500]), np.array([count - 5, 0, 5])
    ids = spans.ragged_arange(begin, length, np.int32)
    assert mapped(ids)
    assert np.array_equal(ids, np.concatenate([np.arange(7, 7 + count - 5), np.arange(500, 505)]))


def test_epoch_sized_arrays_are_copy_on_write_after_a_fork():
    """A forked process (a DataLoader worker) writing to one does not change the parent's."""
    import os

    big = memory.fresh_array(memory._MAP_BYTES // 4, np.int32)
    big[:] = 5
    pid = os.fork()
    if pid == 0:
        big[:] = 9
        os._exit(0)
    os.waitpid(pid, 0)
    assert big[0] == 5 and big[-1] == 5


def _rss_mb() -> float:
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_released_parts_leave_memory() -> None:
    count = memory._MAP_BYTES // 4 * 2  # 128 MiB of int32
    fresh = memory.fresh_array(count, np.int32)
    fresh[:] = 7
    before = _rss_mb()
    memory.release(fresh[10:], 0, count - 10)  # Through a view, as the order file writer does.
    assert before - _rss_mb() > 100
    assert fresh[count // 2] == 0  # An anonymous part is discarded: released only when done.
    memory.release(np.zeros(10), 0, 10)  # Not in a map of its own: nothing to do.


def test_fisher_yates_pass_draws_as_the_shuffles_it_stands_for() -> None:
    """Kept spans as shuffled, the state after them, and the generator's end state all match."""
    lengths = [5, 1, 3_000, 0, 70_000, 2, 40_000]
    begin = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    plain, want = np.random.default_rng(11), []
    for first, length in zip(begin, lengths):
        ids = np.arange(first, first + length, dtype=np.int32)
        plain.shuffle(ids)
        want.append(ids)
    rng = np.random.default_rng(11)
    kept, state = py1e._fisher_yates_pass(begin, lengths, 3_004, rng, np.int32)
    assert len(kept) == 3 and all(np.array_equal(a, b) for a, b in zip(kept, want))
    assert rng.bit_generator.state == plain.bit_generator.state
    replayed = list(py1e._replayed_spans(begin[3:], lengths[3:], state, rng, np.int32))
    assert all(np.array_equal(a, b) for a, b in zip(replayed, want[3:]))


def test_shuffle_each_same_permutation_widened_or_in_place(monkeypatch) -> None:
    lengths = np.array([4, 9_000, 1, 30_000])
    ids = np.arange(int(lengths.sum()), dtype=np.int32)
    widened, in_place = ids.copy(), ids.copy()
    spans.shuffle_each(widened, lengths, np.random.default_rng(3))
    monkeypatch.setattr(spans, '_WIDEN_MAX', 10_000)  # The 30k span is shuffled in place.
    spans.shuffle_each(in_place, lengths, np.random.default_rng(3))
    plain = ids.copy()
    rng, start = np.random.default_rng(3), 0
    for length in lengths.tolist():
        rng.shuffle(plain[start:start + length])
        start += length
    assert np.array_equal(widened, plain) and np.array_equal(in_place, plain)
