"""The reference's shuffles (mosaicml-streaming 0.13.0), sample for sample, as numpy.

Inputs are *shuffle units* (see ``resample``): each whole-shard copy or partial draw, laid end to
end in "big id" space. Every algorithm maps a position of the epoch (a big id) to the big id
read there. The random draws are the reference's, in the same order, from two generators: a
*run* generator seeded with ``seed`` (fixed for the training run) and an *epoch* generator seeded
with ``seed + epoch``:

1. the run generator permutes the units;
2. the permuted line of units is cut into ``num_canonical_nodes`` rows (row ``c`` ends at
   ``total * (c + 1) // num_canonical_nodes``; a unit crossing a row end becomes two *spans*);
3. the epoch generator permutes the spans of each row (all rows first, except for ``py2s``),
   then each algorithm shuffles inside the rows:

* ``py1s``: every span's samples, span after span;
* ``py2s``: before cutting, the run generator also shuffles every unit's samples; then, row by
  row, the epoch generator permutes the row's spans and shuffles each span's samples;
* ``py1e``: row by row, every span's samples are shuffled, then for every span a window size
  ``w`` is drawn from ``[0.75 * block, 1.25 * block)`` and each of its samples moves by a uniform
  shift in ``±(w - span) / 2``, bounded so it stays in the row; the row is read in order of the
  shifted positions;
* ``py1br``: after all rows' span permutations, the epoch generator draws one *stagger* per row
  (``[0, 0.75 * block)``); then, row by row, it draws block sizes from ``[0.75 * block,
  1.25 * block)`` until they cover the row, the first block shortened by the stagger (the first
  few blocks all start at the row's start, so they overlap), and shuffles the blocks in turn;
* ``naive``: one permutation of the whole epoch by the epoch generator;
* ``py1b`` (ours; the reference dropped it in 0.11): spans in their epoch order, then fixed
  blocks of ``block`` samples each shuffled by the epoch generator.

Ties between equal shifted positions in ``py1e`` (measure zero; about one pair per 10^8
samples) are broken by position, where the reference's sort leaves them in an order of its own.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Union

import numpy as np
from numpy.lib.stride_tricks import as_strided

from streaming.order.memory import fresh_array
from streaming.util import sorted_unique

__all__ = ['EXACT_SHUFFLE_ALGOS', 'RowSpans', 'cut_rows', 'id_dtype', 'permute_rows',
           'shuffle_steps', 'FinalParts']

EXACT_SHUFFLE_ALGOS = ('naive', 'py1b', 'py1br', 'py1e', 'py1s', 'py2s')


class RowSpans:
    """Spans laid out row by row: span ``i`` covers big ids ``begin[i]:begin[i] + length[i]``.

    Row ``r`` holds spans ``first[r]:first[r + 1]``.
    """

    def __init__(self, begin: np.ndarray, length: np.ndarray, first: np.ndarray) -> None:
        self.begin, self.length, self.first = begin, length, first

    @property
    def num_rows(self) -> int:
        return len(self.first) - 1

    def row(self, row: int) -> slice:
        return slice(int(self.first[row]), int(self.first[row + 1]))


def cut_rows(unit_begin: np.ndarray, unit_size: np.ndarray, num_rows: int) -> RowSpans:
    """Cut units (in layout order) laid end to end into ``num_rows`` rows of spans."""
    sizes = np.asarray(unit_size, np.int64)
    total = int(sizes.sum())
    starts = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    bounds = total * np.arange(1, num_rows, dtype=np.int64) // num_rows
    cuts = sorted_unique(np.concatenate((starts, bounds)))
    cut_starts, cut_ends = cuts[:-1], cuts[1:]
    unit = np.searchsorted(starts, cut_starts, 'right') - 1
    begin = np.asarray(unit_begin, np.int64)[unit] + (cut_starts - starts[unit])
    first = np.concatenate([[0], np.searchsorted(cut_ends, bounds, 'right'), [len(cut_starts)]])
    return RowSpans(begin, cut_ends - cut_starts, first.astype(np.int64))


def _ragged_arange(begin: np.ndarray, length: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """``concat(arange(b, b + n) for b, n in zip(begin, length))``.

    Built as the running sum of steps: 1 inside a run, a jump where a run starts.
    """
    keep = np.asarray(length) > 0
    begin, length = np.asarray(begin, np.int64)[keep], np.asarray(length, np.int64)[keep]
    ends = np.cumsum(length)
    out = fresh_array(int(ends[-1]) if len(ends) else 0, dtype)
    if len(out):
        out.fill(1)
        out[0] = begin[0]
        out[ends[:-1]] = (begin[1:] - (begin[:-1] + length[:-1] - 1)).astype(dtype)
        np.cumsum(out, out=out)
    return out


def id_dtype(total: int) -> type:
    return np.int32 if total < np.iinfo(np.int32).max else np.int64


def permute_rows(spans: RowSpans, rng: np.random.Generator) -> RowSpans:
    """Permute the spans of every row, row after row, with ``rng``."""
    order = np.arange(len(spans.begin))
    for row in range(spans.num_rows):
        part = spans.row(row)
        order[part] = order[part][rng.permutation(part.stop - part.start)]
    return RowSpans(spans.begin[order], spans.length[order], spans.first)


_WIDEN_MAX = 1 << 22  # Longer spans are shuffled in place (no 8-byte copy of them).


def _shuffle_each(ids: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> None:
    """Shuffle consecutive pieces of ``ids`` of ``lengths`` in place, in order.

    Narrower ids are shuffled as int64 in a buffer (see ``_span_ids``): the same permutation,
    a third less time even with the two copies (spans up to ``_WIDEN_MAX``).
    """
    sizes = lengths.tolist()
    buffer = np.empty(min(max(sizes, default=0), _WIDEN_MAX) if ids.itemsize != 8 else 0,
                      np.int64)
    start = 0
    for length in sizes:
        if length > 1:
            piece = ids[start:start + length]
            if length <= len(buffer):
                work = buffer[:length]
                work[:] = piece
                rng.shuffle(work)
                piece[:] = work
            else:
                rng.shuffle(piece)
        start += length


def _span_ids(begin: int, length: int, rng: np.random.Generator, dtype: type) -> np.ndarray:
    """Ids ``begin:begin + length`` shuffled by ``rng`` (as the reference shuffles a span).

    Shuffled as int64: numpy's Fisher-Yates moves 8-byte items faster than 4-byte ones
    (docs/shuffling.md, "Setup time and memory"), with the same draws, so the same permutation.
    """
    ids = np.arange(begin, begin + length, dtype=np.int64)
    if length > 1:
        rng.shuffle(ids)
    return ids.astype(dtype, copy=False)


def _fisher_yates_pass(begin: list[int], lengths: list[int], keep: int,
                       rng: np.random.Generator,
                       dtype: type) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Every span's Fisher-Yates draws from ``rng``, in turn: the sequential part of py1e.

    Only the first spans' ids (enough to cover ``keep`` samples) are kept; the others are
    shuffled for the draws alone (a shuffle's draws depend only on the length) in a view whose
    items all share 8 bytes, so this pass writes nothing epoch-sized. Returns the kept spans'
    ids and the generator's state after them, from which ``_replayed_spans`` gives the others'
    ids.
    """
    kept: list[np.ndarray] = []
    count = 0
    while len(kept) < len(lengths) and count < keep:
        span = len(kept)
        kept.append(_span_ids(begin[span], lengths[span], rng, dtype))
        count += lengths[span]
    state = rng.bit_generator.state
    rest = lengths[len(kept):]
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
        yield _span_ids(first, length, replay, dtype)


_SMALL_ROW = 1 << 16  # Rows up to this many samples are shuffled whole (``_py1e_small_row``).


def _py1e_small_row(starts: list[int], sizes: list[int], block_size: int,
                    rng: np.random.Generator, out: np.ndarray) -> None:
    """``_py1e_row`` for a short row, all at once.

    The same draws in the same order (every span's Fisher-Yates, then every span's shifts) and
    the same order of the row, a sort of the shifted positions (ties by position), without the
    window machinery whose fixed cost would dominate a small world.
    """
    ids = [_span_ids(first, length, rng, out.dtype) for first, length in zip(starts, sizes)]
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


FinalParts = Union[int, tuple[int, int, int]]
"""What is final: the first ``n`` positions, or ``(head, tail_begin, tail_stop)``: positions
``[0, head)`` and ``[tail_begin, tail_stop)``."""


def _py1e_rows(spans: RowSpans, row_starts: np.ndarray, block_size: int,
               rng: np.random.Generator, out: np.ndarray,
               first_position: int) -> Iterator[FinalParts]:
    """Every row of ``out`` the py1e way, starting with the row holding ``first_position``.

    Rows draw from ``rng`` one after the other. To start at row ``r``, the draws of rows
    ``0..r-1`` are made and thrown away first (``_skip_py1e_row``: their Fisher-Yates and
    shift draws, no sorting nor writing, a small part of a row's work); rows ``r..`` follow,
    then rows ``0..r-1`` from the generator's state saved at row 0. The ids are the same.
    """
    first = int(np.searchsorted(row_starts[1:], first_position, 'right')) \
        if 0 < first_position < len(out) else 0
    first = min(first, spans.num_rows - 1) if spans.num_rows else 0
    start_state = rng.bit_generator.state
    for row in range(first):
        part = spans.row(row)
        _skip_py1e_row(spans.length[part], block_size, rng, out.dtype)
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


def _blocks_row(ids: np.ndarray, block_size: int, rng: np.random.Generator) -> None:
    for start in range(0, len(ids), block_size):
        rng.shuffle(ids[start:start + block_size])


def py1br_blocks(length: int, stagger: int, block_size: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The py1br blocks ``(starts, stops)`` of a row of ``length``; sizes are drawn from ``rng``.

    A running end ``e`` (from 0) gives block ``[max(e - stagger, 0), min(e + size - stagger,
    length))`` and grows by that block's length until it reaches ``length``. While ``e < stagger``
    blocks start at 0 (at most ``stagger.bit_length() + 1`` of them, as ``e`` more than doubles);
    after that they follow one another. Sizes are drawn in one call (numpy draws the same values
    one by one or at once), as many as the blocks use.
    """
    low, high = int(0.75 * block_size), int(1.25 * block_size)
    bound = length // low + stagger.bit_length() + 4
    probe = np.random.Generator(type(rng.bit_generator)())
    probe.bit_generator.state = rng.bit_generator.state
    sizes = probe.integers(low, high, bound)
    starts, stops = [], []
    end, used = 0, 0
    while end < length and end < stagger:
        start, stop = 0, min(end + int(sizes[used]) - stagger, length)
        starts.append(start)
        stops.append(stop)
        end += stop - start
        used += 1
    if end < length:
        ends = (end - stagger) + np.cumsum(sizes[used:])
        count = int(np.searchsorted(ends, length - stagger, 'left')) + 1
        starts.extend([end - stagger] + ends[:count - 1].tolist())
        stops.extend(np.minimum(ends[:count], length).tolist())
        used += count
    rng.integers(low, high, used)  # advance the real generator past the sizes used
    return np.array(starts, np.int64), np.array(stops, np.int64)


def _py1br_rows(ids: np.ndarray, spans: RowSpans, row_starts: np.ndarray, block_size: int,
                rng: np.random.Generator) -> None:
    """Shuffle every row of ``ids`` in place the py1br way (one stagger per row, then blocks)."""
    if int(0.75 * block_size) < 1:
        raise ValueError(f"shuffle_algo='py1br' needs a shuffle block size of at least 2 (its "
                         f'blocks are 0.75-1.25 x the block size), got {block_size}')
    staggers = rng.integers(0, int(0.75 * block_size), spans.num_rows).tolist()
    for row, stagger in enumerate(staggers):
        row_ids = ids[row_starts[row]:row_starts[row + 1]]
        starts, stops = py1br_blocks(len(row_ids), stagger, block_size, rng)
        for start, stop in zip(starts.tolist(), stops.tolist()):
            rng.shuffle(row_ids[start:stop])


def shuffle_steps(algo: str, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int,
                  epoch: int, block_size: int,
                  first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """A built-in shuffle's unit positions (``shuffle.shuffle_positions``), a part at a time.

    Yields the output array first, then, as the work goes on, how many of its first positions
    are final (the last yield is all of them). With ``py1e``, the row holding
    ``first_position`` (where a node of a multi-node job reads first) is computed first: see
    ``_py1e_rows``; its progress is then ``(head, tail_begin, tail_stop)``.
    """
    sizes = np.asarray(unit_sizes, np.int64)
    total = int(sizes.sum())
    dtype = id_dtype(total)
    if algo == 'naive':
        yield np.random.default_rng(seed + epoch).permutation(total).astype(dtype, copy=False)
        yield total
        return
    if algo not in EXACT_SHUFFLE_ALGOS:
        raise ValueError(f'`shuffle_algo` must be one of {EXACT_SHUFFLE_ALGOS}, got {algo!r}')
    run_rng = np.random.default_rng(seed)
    unit_begin = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=unit_begin[1:])
    order = run_rng.permutation(len(sizes))
    unit_begin, sizes = unit_begin[order], sizes[order]
    epoch_rng = np.random.default_rng(seed + epoch)
    if algo == 'py2s':
        source = _ragged_arange(unit_begin, sizes, dtype)
        _shuffle_each(source, sizes, run_rng)
        laid = np.zeros(len(sizes), np.int64)
        np.cumsum(sizes[:-1], out=laid[1:])
        spans = cut_rows(laid, sizes, num_canonical_nodes)
        out = np.empty(total, dtype)
        yield out
        written = 0
        for row in range(spans.num_rows):
            part = spans.row(row)
            picked = epoch_rng.permutation(part.stop - part.start)
            begin, length = spans.begin[part][picked], spans.length[part][picked]
            chunk = source[_ragged_arange(begin, length)]
            _shuffle_each(chunk, length, epoch_rng)
            out[written:written + len(chunk)] = chunk
            written += len(chunk)
            yield written
        yield total
        return
    spans = permute_rows(cut_rows(unit_begin, sizes, num_canonical_nodes), epoch_rng)
    row_starts = np.concatenate([[0], np.cumsum(spans.length)])[spans.first]
    if algo == 'py1e':  # Span ids are made as the rows' windows need them.
        shuffled = fresh_array(total, dtype)
        yield shuffled
        yield from _py1e_rows(spans, row_starts, block_size, epoch_rng, shuffled,
                              first_position)
        yield total
        return
    out = _ragged_arange(spans.begin, spans.length, dtype)
    if algo == 'py1s':
        yield out
        _shuffle_each(out, spans.length, epoch_rng)
        yield total
        return
    if algo == 'py1br':
        yield out
        _py1br_rows(out, spans, row_starts, block_size, epoch_rng)
        yield total
        return
    yield out
    for row in range(spans.num_rows):
        stop = int(row_starts[row + 1])
        _blocks_row(out[int(row_starts[row]):stop], block_size, epoch_rng)
        yield stop
    yield total
