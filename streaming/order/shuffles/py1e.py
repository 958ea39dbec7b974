"""``py1e``: the reference's block-shift shuffle, sample for sample, row by row.

Row by row, every span's samples are shuffled, then for every span a window size ``w`` is drawn
from ``[0.75 * block, 1.25 * block)`` and each of its samples moves by a uniform shift in
``±(w - span) / 2``, bounded so it stays in the row; the row is read in order of the shifted
positions (see ``rows`` for what comes before). Ties between equal shifted positions (measure
zero; about one pair per 10^8 samples) are broken by position, where the reference's sort leaves
them in an order of its own.

The work is incremental and memory-bounded: a row's first positions are final once its first
window is sorted, and the row holding ``first_position`` (where a node of a multi-node job reads
first) is computed first.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from streaming.order.memory import fresh_array
from streaming.order.shuffles.rows import FinalParts, RowSpans, id_dtype, rows_of_units, span_ids
from streaming.util import sorted_unique

try:  # The optional C skip of earlier rows' draws (setup.py); numpy makes them without it.
    from streaming.order.shuffles import _py1e_skip
except ImportError:
    _py1e_skip = None

__all__ = ['steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The output array, then what of it is final, as it becomes final (last: all of it)."""
    spans, row_starts, rng = rows_of_units(unit_sizes, num_canonical_nodes, seed, epoch)
    total = int(spans.length.sum())
    shuffled = fresh_array(total, id_dtype(total))  # Span ids are made as the windows need them.
    yield shuffled
    yield from _py1e_rows(spans, row_starts, block_size, rng, shuffled, first_position)
    yield total


def _fisher_yates_pass(begin: list[int], lengths: list[int], keep: int,
                       rng: np.random.Generator,
                       dtype: type) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Every span's Fisher-Yates draws from ``rng``, in turn: the sequential part of py1e.

    Only the first spans' ids (enough to cover ``keep`` samples) are kept; the others' draws
    alone are made (a shuffle's draws depend only on the length): by the C extension if built,
    else by shuffling in a view whose items all share 8 bytes, so this pass writes nothing
    epoch-sized. Returns the kept spans' ids and the generator's state after them, from which
    ``_replayed_spans`` gives the others' ids.
    """
    kept: list[np.ndarray] = []
    count = 0
    while len(kept) < len(lengths) and count < keep:
        span = len(kept)
        kept.append(span_ids(begin[span], lengths[span], rng, dtype))
        count += lengths[span]
    state = rng.bit_generator.state
    rest = lengths[len(kept):]
    if _skip_natively(rng, np.array(rest, np.int64), np.array([len(rest)], np.int64), 0, 2,
                      shifts=False):
        return kept, state
    # Every item of this view is the same 8 bytes: each swap stays in one cache line, and a
    # span of any length costs no memory.
    nowhere = as_strided(np.zeros(1, np.int64), shape=(max(rest, default=0),), strides=(0,))
    for length in rest:
        if length > 1:
            rng.shuffle(nowhere[:length])
    return kept, state


def _replayed_spans(begin: list[int], lengths: list[int], state: dict[str, Any],
                    rng: np.random.Generator, dtype: type) -> Iterator[np.ndarray]:
    """The shuffled ids of spans ``begin``/``lengths``, drawn again from ``state``."""
    replay = np.random.Generator(type(rng.bit_generator)())
    replay.bit_generator.state = state
    for first, length in zip(begin, lengths):
        yield span_ids(first, length, replay, dtype)


_SMALL_ROW = 1 << 16  # Rows up to this many samples are shuffled whole (``_py1e_small_row``).


def _py1e_small_row(starts: list[int], sizes: list[int], block_size: int,
                    rng: np.random.Generator, out: np.ndarray) -> None:
    """``_py1e_row`` for a short row, all at once.

    The same draws in the same order (every span's Fisher-Yates, then every span's shifts) and
    the same order of the row, a sort of the shifted positions (ties by position), without the
    window machinery whose fixed cost would dominate a small world.
    """
    ids = [span_ids(first, length, rng, out.dtype) for first, length in zip(starts, sizes)]
    positions = np.concatenate(list(_shifted_positions(
        sizes, len(out), int(0.75 * block_size), int(1.25 * block_size), rng)))
    order = np.argsort(positions)
    ordered = positions[order]
    if (ordered[1:] == ordered[:-1]).any():  # Ties (measure zero): by position, as stable.
        order = np.argsort(positions, kind='stable')
    np.take(np.concatenate(ids), order, out=out)


def _py1e_row(begin: np.ndarray, lengths: np.ndarray, block_size: int,
              rng: np.random.Generator, out: np.ndarray) -> Iterator[int]:
    """Shuffle one row (spans ``begin``/``lengths``, in order) the py1e way into ``out``.

    The row's spans are first shuffled by ``rng`` one after another (all of them: the shifts
    are drawn after), keeping only the first spans' ids; the others' are drawn again, span by
    span, as the windows reach them. The shifted positions are drawn span by span and sorted
    a window of position values at a time, as soon as every sample that can land in the
    window is drawn: nothing row-sized is held. The first window is small, so the row's first
    ids are final soon after its Fisher-Yates pass. Yields how much of ``out`` is final after
    each window.
    """
    starts, sizes = begin.tolist(), lengths.tolist()
    total = len(out)
    if total <= _SMALL_ROW:
        if total:
            _py1e_small_row(starts, sizes, block_size, rng, out)
            yield total
        return
    low_block, high_block = int(0.75 * block_size), int(1.25 * block_size)
    reach = high_block // 2 + 2  # Exceeds every shift: half a window, less the span, < this.
    window = max(1 << 20, min(4 * reach, 1 << 23))
    first_window = min(window, 1 << 20)
    kept, state = _fisher_yates_pass(starts, sizes, first_window + reach, rng, out.dtype)
    id_parts = itertools.chain(kept, _replayed_spans(starts[len(kept):], sizes[len(kept):],
                                                     state, rng, out.dtype))
    del kept
    draws = _shifted_positions(sizes, total, low_block, high_block, rng)
    held = np.zeros(0)
    held_ids = np.zeros(0, out.dtype)
    held_from, drawn, written, start = 0, 0, 0, 0
    while start < total:
        stop = min(start + (first_window if start == 0 else window), total)
        parts, ids = [], []
        while drawn < min(stop + reach, total):
            part = next(draws)
            parts.append(part)
            ids.append(next(id_parts))
            drawn += len(part)
        first = max(start - reach, 0)
        held = np.concatenate([held[first - held_from:], *parts])
        held_ids = np.concatenate([held_ids[first - held_from:], *ids])
        del parts, ids
        held_from = first
        picked = _window_order(held, start, stop, stop == total, window + reach)
        np.take(held_ids, picked, out=out[written:written + len(picked)])
        written += len(picked)
        start = stop
        yield written


def _py1e_rows(spans: RowSpans, row_starts: np.ndarray, block_size: int,
               rng: np.random.Generator, out: np.ndarray,
               first_position: int) -> Iterator[FinalParts]:
    """Every row of ``out`` the py1e way, starting with the row holding ``first_position``.

    Rows draw from ``rng`` one after the other. To start at row ``r``, the draws of rows
    ``0..r-1`` are skipped first (``_skip_py1e_rows``: no sorting nor writing, no value kept);
    rows ``r..`` follow,
    then rows ``0..r-1`` from the generator's state saved at row 0. The ids are the same.
    """
    first = int(np.searchsorted(row_starts[1:], first_position, 'right')) \
        if 0 < first_position < len(out) else 0
    first = min(first, spans.num_rows - 1) if spans.num_rows else 0
    start_state = rng.bit_generator.state
    _skip_py1e_rows(spans, first, block_size, rng, out.dtype)
    pivot = int(row_starts[first]) if first else 0
    for row in list(range(first, spans.num_rows)) + [-1] + list(range(first)):
        if row < 0:  # The rows before ``first``, from where they start.
            rng.bit_generator.state = start_state
            continue
        part, begin = spans.row(row), int(row_starts[row])
        rows = slice(begin, int(row_starts[row + 1]))
        for written in _py1e_row(spans.begin[part], spans.length[part], block_size, rng,
                                 out[rows]):
            if not first:
                yield begin + written
            elif row >= first:
                yield 0, pivot, begin + written
            else:
                yield begin + written, pivot, len(out)


_UINT64 = (1 << 64) - 1


def _skip_py1e_rows(spans: RowSpans, count: int, block_size: int, rng: np.random.Generator,
                    dtype: type) -> None:
    """Bring ``rng`` to its state after rows ``0..count-1``'s draws, keeping none of them.

    With the C extension (numpy's PCG64 replayed inline, the uniform shifts jumped over) this
    costs a few ns per sample; without it numpy makes every draw (``_skip_py1e_row``). The
    generator's state afterwards is the same either way (tests/order/test_py1e_skip.py).
    """
    low_block, high_block = int(0.75 * block_size), int(1.25 * block_size)
    if not count:
        return
    ends = np.ascontiguousarray(spans.first[1:count + 1], np.int64)
    lengths = np.ascontiguousarray(spans.length[:int(ends[-1])], np.int64)
    if not _skip_natively(rng, lengths, ends, low_block, high_block):
        for row in range(count):
            _skip_py1e_row(spans.length[spans.row(row)], block_size, rng, dtype)


def _skip_natively(rng: np.random.Generator, lengths: np.ndarray, ends: np.ndarray,
                   low_block: int, high_block: int, shifts: bool = True) -> bool:
    """``_py1e_skip.skip_rows`` on ``rng``'s state, if the extension and a PCG64 are there."""
    if _py1e_skip is None or type(rng.bit_generator) is not np.random.PCG64 \
            or not 0 < high_block - low_block <= _UINT64 >> 32:
        return False
    state = rng.bit_generator.state
    inner = state['state']
    high, low, has_uint32, uinteger = _py1e_skip.skip_rows(
        inner['state'] >> 64, inner['state'] & _UINT64, inner['inc'] >> 64,
        inner['inc'] & _UINT64, state['has_uint32'], state['uinteger'], lengths, ends,
        low_block, high_block, shifts)
    rng.bit_generator.state = {**state, 'state': {'state': high << 64 | low, 'inc': inner['inc']},
                               'has_uint32': has_uint32, 'uinteger': uinteger}
    return True


def _skip_py1e_row(lengths: np.ndarray, block_size: int, rng: np.random.Generator,
                   dtype: type) -> None:
    """Draw from ``rng`` what ``_py1e_row`` draws for a row of span ``lengths``, keeping none."""
    sizes = lengths.tolist()
    _fisher_yates_pass([0] * len(sizes), sizes, 0, rng, dtype)
    low_block, high_block = int(0.75 * block_size), int(1.25 * block_size)
    for _ in _shifted_positions(sizes, sum(sizes), low_block, high_block, rng):
        pass


def _shifted_positions(lengths: list[int], total: int, low_block: int, high_block: int,
                       rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Each span's shifted positions, in turn: a window size and a uniform shift per sample."""
    start = 0
    for length in lengths:
        window = int(rng.integers(low_block, high_block))
        half = max((window - length) / 2, 0)
        low, high = max(-half, -start), min(half, total - start - length)
        position = np.arange(start, start + length, dtype=np.float64)
        position += rng.uniform(low, high, length)
        start += length
        yield position


def _window_order(chunk: np.ndarray, start: int, stop: int, last: bool,
                  span: int) -> np.ndarray:
    """Indices of ``chunk``'s values in ``[start, stop)``, sorted by value, ties by index.

    ``last``: the window has no upper end; ``span`` bounds ``chunk - start`` inside it. The
    (position, index) pairs are packed into one uint64 (fixed-point position above, index
    below) and sorted with numpy's vectorised integer sort; the rare pairs whose fixed-point
    positions collide are re-ordered by their exact positions.
    """
    inside = chunk >= start
    if not last:
        inside &= chunk < stop
    local = np.flatnonzero(inside)
    del inside
    index_bits = max(1, len(chunk).bit_length())
    fraction_bits = 64 - index_bits - max(1, span.bit_length())
    values = chunk[local]
    values -= start
    values *= float(1 << fraction_bits)
    packed = values.astype(np.uint64)
    del values
    packed <<= np.uint64(index_bits)
    packed |= local.view(np.uint64)  # Indices are >= 0: the same bits.
    del local
    packed.sort()
    picked = (packed & np.uint64((1 << index_bits) - 1)).view(np.int64)
    packed >>= np.uint64(index_bits)
    _resolve_collisions(picked, packed, chunk)
    return picked


def _resolve_collisions(picked: np.ndarray, fixed: np.ndarray, chunk: np.ndarray) -> None:
    """Re-order, in place, runs of ``picked`` whose fixed-point keys are equal."""
    same = np.flatnonzero(fixed[1:] == fixed[:-1])
    if not len(same):
        return
    members = sorted_unique(np.concatenate((same, same + 1)))
    run = np.cumsum(np.diff(members, prepend=-2) != 1)
    ids = picked[members]
    picked[members] = ids[np.lexsort((ids, chunk[ids], run))]
