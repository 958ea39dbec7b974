"""Canonical-node rows: an epoch's samples dealt to canonical nodes, each row shuffled.

Units (whole-shard copies and partial subsets) are dealt to canonical nodes as contiguous runs of
a run-level random shard order, so a node keeps the same shards epoch after epoch (except where a
unit is cut by a row boundary). Each node's row is then shuffled on its own by the registered
shuffle (see ``shuffle``); a whole-epoch shuffle such as ``naive`` permutes everything first and
the rows are cut afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streaming.order.keysort import place_by_keys
from streaming.order.rng import (
    TAG_NODE_SHUFFLE,
    TAG_SHARD_ORDER,
    TAG_UNIT_PRESHUFFLE,
    TAG_WHOLE_EPOCH,
    make_rng,
)
from streaming.order.sampling import ShardDraw
from streaming.order.shuffle import CanonicalRow, ShuffleAlgo, get_shuffle
from streaming.order.units import (
    Units,
    array_span_source,
    make_units,
    shard_span_source,
    split_rows,
)

__all__ = ['Layout', 'canonical_layout']


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


def _id_dtype(draw: ShardDraw) -> type:
    return np.uint32 if int(draw.shard_sizes.sum()) <= np.iinfo(np.uint32).max else np.int64


def _id_bits(draw: ShardDraw) -> int:
    return max(1, (int(draw.shard_sizes.sum()) - 1).bit_length())


def _all_units(units: Units) -> CanonicalRow:
    """Every unit whole, in layout order, as one row of spans."""
    count = len(units.size)
    return CanonicalRow(shard_span_source(units), np.arange(count),
                    np.zeros(count, np.int64), units.size, _id_bits(units.draw))


def _whole_epoch_layout(algo: ShuffleAlgo, units: Units, num_rows: int, seed: int, epoch: int,
                        layout_tag: int, dtype: type) -> Layout:
    """Permute every id at once with ``algo.shuffle_epoch``, then cut the result into rows."""
    everything = np.empty(units.total, dtype)
    _all_units(units).write_to(everything)
    shuffle_epoch = algo.shuffle_epoch
    assert shuffle_epoch is not None
    shuffle_epoch(everything, make_rng(seed, TAG_WHOLE_EPOCH, epoch, layout_tag))
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
    algo = get_shuffle(shuffle_algo) if shuffle else None
    shard_rank = None
    if algo is not None and algo.shuffle_row is not None:
        shard_rank = np.empty(len(draw.shard_sizes), np.int64)
        shard_rank[make_rng(seed, TAG_SHARD_ORDER).permutation(len(shard_rank))] = \
            np.arange(len(shard_rank))
    units = make_units(draw, shards, shard_rank)
    num_rows = min(num_canonical_nodes, units.total)
    if num_rows == 0:
        return Layout(np.empty((0, 0), dtype), np.empty(0, np.int64))
    if algo is not None and algo.shuffle_epoch is not None:
        return _whole_epoch_layout(algo, units, num_rows, seed, epoch, layout_tag, dtype)
    source = shard_span_source(units)
    if algo is not None and algo.shuffle_within_units:
        in_unit_order = np.empty(units.total, dtype)
        whole = _all_units(units)
        place_by_keys(in_unit_order, whole.read, units.size, units.size.astype(np.float64),
                      make_rng(seed, TAG_UNIT_PRESHUFFLE, layout_tag), reflect=False,
                      id_bits=whole.id_bits)
        source = array_span_source(in_unit_order, units)
    spans = split_rows(units.size, num_rows)
    width = int(spans.row_lengths.max())
    rows = np.empty((num_rows, width), dtype)
    for row in range(num_rows):
        length = int(spans.row_lengths[row])
        row_spans = CanonicalRow(source, *spans.row(row), _id_bits(draw))
        if algo is None:
            row_spans.write_to(rows[row, :length])
        else:
            rng = make_rng(seed, TAG_NODE_SHUFFLE, epoch, layout_tag, row)
            algo.shuffle_row(row_spans, rows[row, :length], block_size, rng)  # type: ignore[misc]
        rows[row, length:] = rows[row, :width - length]
    return Layout(rows, spans.row_lengths)
