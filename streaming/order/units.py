"""Shuffle units, and the spans they are cut into when dealt to canonical nodes.

A *unit* is one whole-shard copy or one shard's partial subset (see ``sampling.ShardDraw``). Units
are laid end to end and the line is cut into equal rows, one per canonical node; a unit cut by a
row boundary becomes two *spans*. Nothing here holds per-sample arrays except what a
``SpanSource`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from streaming.order.sampling import ShardDraw

__all__ = ['SpanSource', 'Spans', 'Units', 'array_span_source', 'make_units', 'shard_span_source',
           'split_rows']

# (span units, begins within unit, lengths) -> the spans' global sample ids, end to end
SpanSource = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Units:
    """Units in layout order.

    For each: its shard, its size, and where its subset starts in ``draw.subset_offsets`` (-1
    for a whole-shard copy).
    """

    shard: np.ndarray
    size: np.ndarray
    subset_start: np.ndarray
    draw: ShardDraw
    shard_bases: np.ndarray

    @property
    def total(self) -> int:
        return int(self.size.sum())


def make_units(draw: ShardDraw, shards: np.ndarray, shard_rank: np.ndarray | None = None) -> Units:
    """The units of ``shards``, in layout order.

    By (copy, shard), so an unshuffled epoch walks the dataset once before repeating it; or with
    ``shard_rank`` by (rank of shard, copy), so all copies of a shard sit together and go to the
    same canonical node.
    """
    sizes = draw.shard_sizes
    shards = np.asarray(shards, dtype=np.int64)
    shards = shards[sizes[shards] > 0]
    per_shard = draw.copies[shards] + (draw.remainder[shards] > 0)
    shard = np.repeat(shards, per_shard)
    copy = np.arange(len(shard), dtype=np.int64) - np.repeat(np.cumsum(per_shard) - per_shard,
                                                             per_shard)
    whole = copy < draw.copies[shard]
    size = np.where(whole, sizes[shard], draw.remainder[shard])
    subset_start = np.where(whole, -1, draw.subset_starts[shard])
    if shard_rank is None:
        order = np.lexsort((shard, copy))
    else:
        order = np.lexsort((copy, shard_rank[shard]))
    bases = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=bases[1:])
    return Units(shard[order], size[order], subset_start[order], draw, bases)


@dataclass(frozen=True)
class Spans:
    """Pieces of units, row by row: row ``r`` holds spans ``row_first[r]:row_first[r + 1]``."""

    unit: np.ndarray
    begin: np.ndarray
    length: np.ndarray
    row_first: np.ndarray
    row_lengths: np.ndarray

    def row(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        part = slice(self.row_first[row], self.row_first[row + 1])
        return self.unit[part], self.begin[part], self.length[part]


def split_rows(unit_sizes: np.ndarray, num_rows: int) -> Spans:
    """Cut units laid end to end into ``num_rows`` rows.

    Row ``r`` covers positions ``[total * r // num_rows, total * (r + 1) // num_rows)``.
    """
    total = int(unit_sizes.sum())
    unit_starts = np.zeros(len(unit_sizes) + 1, np.int64)
    np.cumsum(unit_sizes, out=unit_starts[1:])
    bounds = total * np.arange(num_rows + 1, dtype=np.int64) // max(num_rows, 1)
    cuts = np.union1d(unit_starts, bounds)
    starts, ends = cuts[:-1], cuts[1:]
    unit = np.searchsorted(unit_starts, starts, 'right') - 1
    row = np.searchsorted(bounds, starts, 'right') - 1
    row_first = np.searchsorted(row, np.arange(num_rows + 1))
    return Spans(unit, starts - unit_starts[unit], ends - starts, row_first, np.diff(bounds))


def _ragged_arange(offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concat(arange(o, o + n) for o, n in zip(offsets, lengths))`` without a Python loop."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) + np.repeat(offsets - (ends - lengths), lengths)


def shard_span_source(units: Units) -> SpanSource:
    """A span source reading each unit's ids from its shard (whole copy) or its drawn subset."""
    subset_offsets = units.draw.subset_offsets

    def gather(unit: np.ndarray, begin: np.ndarray, length: np.ndarray) -> np.ndarray:
        base = units.shard_bases[units.shard[unit]]
        subset = units.subset_start[unit]
        ids = _ragged_arange(base + begin, length)
        partial = subset >= 0
        if partial.any():
            mask = np.repeat(partial, length)
            picks = _ragged_arange(subset[partial] + begin[partial], length[partial])
            ids[mask] = np.repeat(base[partial], length[partial]) + subset_offsets[picks]
        return ids

    return gather


def array_span_source(ids_in_unit_order: np.ndarray, units: Units) -> SpanSource:
    """A span source reading from an array holding every unit's ids, units end to end."""
    unit_starts = np.cumsum(units.size) - units.size

    def gather(unit: np.ndarray, begin: np.ndarray, length: np.ndarray) -> np.ndarray:
        return ids_in_unit_order[_ragged_arange(unit_starts[unit] + begin, length)]

    return gather
