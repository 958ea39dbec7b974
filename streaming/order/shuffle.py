"""Shuffles: the order of one epoch's samples within each canonical node.

Units (whole-shard copies and partial subsets) are dealt to canonical nodes as contiguous runs of
a run-level random shard order, so a node keeps the same shards epoch after epoch (except where a
unit is cut by a row boundary). Each node's row is then shuffled on its own:

* ``py1s``: the node's spans in random order, samples shuffled within each span;
* ``py2s``: like py1s, after a run-level shuffle inside every unit (so a unit cut by a row
  boundary splits into two random halves rather than two contiguous ones);
* ``py1b``: spans in random order, then samples shuffled within fixed blocks of ``block_size``;
* ``py1br``: the same with block sizes drawn from [0.75, 1.25) x ``block_size`` and a random
  first block (stagger), so block edges differ between nodes and epochs;
* ``py1e`` (default): spans in random order, then every sample is sent to a uniformly random
  place in a window of about ``block_size`` centred on its span (reflected at the row ends), and
  the row is read in order of those places. Spans overlap smoothly instead of meeting at block
  edges, and no sample moves more than about ``block_size / 2`` from its span;
* ``naive``: one uniform permutation of the whole epoch, ignoring shards and nodes.

All but ``naive`` come down to sorting by random keys (see ``keysort``), done a window at a time,
so memory beyond the rows themselves is bounded by the window, not the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streaming.order.keysort import interval_groups, place_by_keys
from streaming.order.rng import (
    TAG_NAIVE,
    TAG_NODE_SHUFFLE,
    TAG_SHARD_ORDER,
    TAG_UNIT_PRESHUFFLE,
    make_rng,
)
from streaming.order.sampling import ShardDraw
from streaming.order.units import (
    SpanSource,
    Units,
    gather_from,
    gather_materialized,
    make_units,
    split_rows,
)

__all__ = ['SHUFFLE_ALGOS', 'Layout', 'canonical_layout', 'default_shuffle_block_size']

SHUFFLE_ALGOS = ('naive', 'py1b', 'py1br', 'py1e', 'py1s', 'py2s')

# Samples handled per step when filling or sorting a row (bounds temporary memory).
_CHUNK = 1 << 21


def default_shuffle_block_size(num_canonical_nodes: int) -> int:
    """The reference's default: ``max(4_000_000 // num_canonical_nodes, 1 << 18)``."""
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


@dataclass(frozen=True)
class Layout:
    """One epoch's samples as canonical-node rows, read as a stream taking each row in turn.

    Stream position ``p`` is ``rows[p % num_rows, p // num_rows]``. Rows shorter than the
    longest (by one sample at most) are padded with their own first samples, so the stream
    visits rows strictly in turn and a node never reads another node's shards.
    """

    rows: np.ndarray
    lengths: np.ndarray

    @property
    def num_rows(self) -> int:
        return self.rows.shape[0]

    @property
    def stream_length(self) -> int:
        return self.rows.size

    def read(self, start: int, stop: int) -> np.ndarray:
        """The ids at stream positions ``[start, stop)``."""
        if self.num_rows == 1:
            return self.rows[0, start:stop]
        first, last = start // self.num_rows, -(-stop // self.num_rows)
        block = self.rows[:, first:last].T.ravel()
        return block[start - first * self.num_rows:stop - first * self.num_rows]

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The ids at arbitrary stream positions."""
        return self.rows[positions % self.num_rows, positions // self.num_rows]


def _write_spans(out: np.ndarray, source: SpanSource, unit: np.ndarray, begin: np.ndarray,
                 length: np.ndarray) -> None:
    """Write the spans' ids into ``out`` end to end, in order."""
    cuts = interval_groups(length, _CHUNK)
    written = 0
    for first, last in zip(cuts[:-1], cuts[1:]):
        ids = source(unit[first:last], begin[first:last], length[first:last])
        out[written:written + len(ids)] = ids
        written += len(ids)


def _block_lengths(total: int, block_size: int, rng: np.random.Generator,
                   randomized: bool) -> np.ndarray:
    """Consecutive block lengths covering ``total``: fixed, or random sizes after a stagger."""
    if not randomized:
        lengths = np.full(-(-total // block_size), block_size, np.int64)
    else:
        stagger = int(rng.integers(0, max(1, int(0.75 * block_size))))
        count = total // max(1, int(0.75 * block_size)) + 2
        sizes = rng.integers(int(0.75 * block_size), int(1.25 * block_size) + 1, count)
        lengths = np.concatenate([[stagger] if stagger else [], np.maximum(sizes, 1)])
        lengths = lengths.astype(np.int64)
    ends = np.minimum(np.cumsum(lengths), total)
    ends = ends[:np.searchsorted(ends, total) + 1]
    return np.diff(ends, prepend=0)


def _shuffle_row(out: np.ndarray, algo: str, source: SpanSource, unit: np.ndarray,
                 begin: np.ndarray, length: np.ndarray, block_size: int,
                 rng: np.random.Generator, id_bits: int) -> None:
    """Fill one canonical node's row with its spans' samples, shuffled by ``algo``."""
    if algo == 'none':
        _write_spans(out, source, unit, begin, length)
        return
    order = rng.permutation(len(unit))
    unit, begin, length = unit[order], begin[order], length[order]

    def read_spans(first: int, last: int) -> np.ndarray:
        return source(unit[first:last], begin[first:last], length[first:last])

    if algo in ('py1s', 'py2s'):
        place_by_keys(out, read_spans, length, length.astype(np.float64), rng, reflect=False,
                      id_bits=id_bits)
    elif algo == 'py1e':
        windows = rng.uniform(0.75 * block_size, 1.25 * block_size, len(length))
        place_by_keys(out, read_spans, length, np.maximum(windows, length), rng, reflect=True,
                      id_bits=id_bits)
    else:  # py1b, py1br: lay spans out, then shuffle inside blocks
        _write_spans(out, source, unit, begin, length)
        blocks = _block_lengths(len(out), block_size, rng, randomized=algo == 'py1br')
        block_starts = np.append(np.cumsum(blocks) - blocks, len(out))

        def read_blocks(first: int, last: int) -> np.ndarray:
            return out[block_starts[first]:block_starts[last]].copy()

        place_by_keys(out, read_blocks, blocks, blocks.astype(np.float64), rng, reflect=False,
                      id_bits=id_bits)


def _id_dtype(draw: ShardDraw) -> type:
    return np.uint32 if int(draw.shard_sizes.sum()) <= np.iinfo(np.uint32).max else np.int64


def _id_bits(draw: ShardDraw) -> int:
    return max(1, (int(draw.shard_sizes.sum()) - 1).bit_length())


def _naive_layout(units: Units, num_rows: int, seed: int, epoch: int, layout_tag: int,
                  dtype: type) -> Layout:
    everything = np.empty(units.total, dtype)
    _write_spans(everything, gather_from(units), np.arange(len(units.size)),
                 np.zeros(len(units.size), np.int64), units.size)
    make_rng(seed, TAG_NAIVE, epoch, layout_tag).shuffle(everything)
    lengths = np.diff(units.total * np.arange(num_rows + 1) // num_rows)
    width = int(lengths.max())
    if units.total == width * num_rows:
        return Layout(everything.reshape(num_rows, width), lengths)
    rows = np.empty((num_rows, width), dtype)
    for row, start in enumerate((np.cumsum(lengths) - lengths).tolist()):
        rows[row, :lengths[row]] = everything[start:start + lengths[row]]
        rows[row, lengths[row]:] = rows[row, :width - lengths[row]]
    return Layout(rows, lengths)


def canonical_layout(draw: ShardDraw, shards: np.ndarray, *, num_canonical_nodes: int,
                     shuffle: bool, shuffle_algo: str, block_size: int, seed: int, epoch: int,
                     layout_tag: int = 0) -> Layout:
    """Deal the epoch's samples from ``shards`` to canonical nodes and shuffle each node's row.

    A dataset with fewer samples than canonical nodes gets one row per sample. ``layout_tag``
    keeps the random draws of separately laid-out streams independent.
    """
    dtype = _id_dtype(draw)
    shard_rank = None
    algo = shuffle_algo if shuffle else 'none'
    if algo not in ('none', 'naive'):
        shard_rank = np.empty(len(draw.shard_sizes), np.int64)
        shard_rank[make_rng(seed, TAG_SHARD_ORDER).permutation(len(shard_rank))] = \
            np.arange(len(shard_rank))
    units = make_units(draw, shards, shard_rank)
    num_rows = min(num_canonical_nodes, units.total)
    if num_rows == 0:
        return Layout(np.empty((0, 0), dtype), np.empty(0, np.int64))
    if algo == 'naive':
        return _naive_layout(units, num_rows, seed, epoch, layout_tag, dtype)
    source = gather_from(units)
    if algo == 'py2s':
        in_unit_order = np.empty(units.total, dtype)
        everything = np.arange(len(units.size))
        place_by_keys(in_unit_order,
                      lambda first, last: source(everything[first:last],
                                                 np.zeros(last - first, np.int64),
                                                 units.size[first:last]),
                      units.size, units.size.astype(np.float64),
                      make_rng(seed, TAG_UNIT_PRESHUFFLE, layout_tag), reflect=False,
                      id_bits=_id_bits(draw))
        source = gather_materialized(in_unit_order, units)
    spans = split_rows(units.size, num_rows)
    width = int(spans.row_lengths.max())
    rows = np.empty((num_rows, width), dtype)
    for row in range(num_rows):
        length = int(spans.row_lengths[row])
        rng = make_rng(seed, TAG_NODE_SHUFFLE, epoch, layout_tag, row)
        _shuffle_row(rows[row, :length], algo, source, *spans.row(row), block_size, rng,
                     _id_bits(draw))
        rows[row, length:] = rows[row, :width - length]
    return Layout(rows, spans.row_lengths)
