"""What the reference's shuffles share: units laid out in rows of spans, and two generators.

Inputs are *shuffle units* (see ``resample``): each whole-shard copy or partial draw, laid end to
end in "big id" space. Every shuffle maps a position of the epoch (a big id) to the big id read
there. The random draws are the reference's, in the same order, from two generators: a *run*
generator seeded with ``seed`` (fixed for the training run) and an *epoch* generator seeded with
``seed + epoch``:

1. the run generator permutes the units;
2. the permuted line of units is cut into ``num_canonical_nodes`` rows (row ``c`` ends at
   ``total * (c + 1) // num_canonical_nodes``; a unit crossing a row end becomes two *spans*);
3. the epoch generator permutes the spans of each row (all rows first, except for ``py2s``),
   then each shuffle (a module of this package named after it) shuffles inside the rows.
"""

from __future__ import annotations

from typing import Union

import numpy as np

from streaming.order.memory import fresh_array
from streaming.util import sorted_unique

__all__ = ['FinalParts', 'RowSpans', 'cut_rows', 'id_dtype', 'permute_rows', 'permuted_units',
           'ragged_arange', 'rows_of_units', 'shuffle_each', 'span_ids', 'spans_in_order']

FinalParts = Union[int, tuple[int, int, int]]
"""What is final: the first ``n`` positions, or ``(head, tail_begin, tail_stop)``: positions
``[0, head)`` and ``[tail_begin, tail_stop)``."""


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


def ragged_arange(begin: np.ndarray, length: np.ndarray, dtype: type = np.int64) -> np.ndarray:
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


def shuffle_each(ids: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> None:
    """Shuffle consecutive pieces of ``ids`` of ``lengths`` in place, in order.

    Narrower ids are shuffled as int64 in a buffer (see ``span_ids``): the same permutation,
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


def span_ids(begin: int, length: int, rng: np.random.Generator, dtype: type) -> np.ndarray:
    """Ids ``begin:begin + length`` shuffled by ``rng`` (as the reference shuffles a span).

    Shuffled as int64: numpy's Fisher-Yates moves 8-byte items faster than 4-byte ones
    (docs/shuffling.md, "Setup time and memory"), with the same draws, so the same permutation.
    """
    ids = np.arange(begin, begin + length, dtype=np.int64)
    if length > 1:
        rng.shuffle(ids)
    return ids.astype(dtype, copy=False)


def permuted_units(unit_sizes: np.ndarray,
                   seed: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """The units' first big ids and sizes in the run generator's order, and that generator."""
    sizes = np.asarray(unit_sizes, np.int64)
    run_rng = np.random.default_rng(seed)
    unit_begin = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=unit_begin[1:])
    order = run_rng.permutation(len(sizes))
    return unit_begin[order], sizes[order], run_rng


def rows_of_units(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int,
                  epoch: int) -> tuple[RowSpans, np.ndarray, np.random.Generator]:
    """Steps 1-3 for all rows at once: the spans, each row's first position, the epoch generator."""
    unit_begin, sizes, _ = permuted_units(unit_sizes, seed)
    epoch_rng = np.random.default_rng(seed + epoch)
    spans = permute_rows(cut_rows(unit_begin, sizes, num_canonical_nodes), epoch_rng)
    row_starts = np.concatenate([[0], np.cumsum(spans.length)])[spans.first]
    return spans, row_starts, epoch_rng


def spans_in_order(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int,
                   epoch: int) -> tuple[np.ndarray, RowSpans, np.ndarray, np.random.Generator]:
    """Every span's big ids in the spans' epoch order, before any shuffle inside a span.

    Returns ``(ids, spans, row starts, epoch generator)`` (see ``rows_of_units``).
    """
    spans, row_starts, rng = rows_of_units(unit_sizes, num_canonical_nodes, seed, epoch)
    total = int(spans.length.sum())
    return ragged_arange(spans.begin, spans.length, id_dtype(total)), spans, row_starts, rng
