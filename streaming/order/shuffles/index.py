"""``index``: a shuffle whose every position is computed on its own, in O(1), from (seed, epoch).

The reference's shuffles are sequential (numpy's Fisher-Yates over every span), so the sample at
position ``p`` is known only once the whole row up to it is shuffled: set-up and resumption cost
O(samples). This one keeps the structure that gives py1e its shard locality and replaces the
sequential parts by keyed bijections:

1. (per run) the units are permuted and cut into ``num_canonical_nodes`` rows, as the reference
   cuts them; (per epoch) the spans of every row are permuted. O(units), done once per epoch.
2. Each row is cut into *blocks* of ``block_size`` consecutive positions, the first block
   shortened by a per-row, per-epoch stagger (so block edges move every epoch).
3. Inside a block of ``n`` positions, position ``i`` reads position ``perm(i)``, where ``perm``
   is a keyed Feistel network on the smallest even-bit domain holding ``n`` (4 rounds of a
   64-bit mixing function, keyed by seed, epoch, row and block), walked in cycles until it
   lands below ``n``: a bijection of ``range(n)`` computed in a few dozen integer operations.

So a reader at row position ``q`` touches only the shards of the spans in ``q``'s block (about
``block_size / shard size + 1``, as many as a py1e window spans), and any position of the epoch
is computed from ``IndexOrder``'s O(units) tables without computing any other position. Written
for this package; Grain's ``index_shuffle`` was read as prior art only.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.memory import fresh_array
from streaming.order.shuffles.rows import FinalParts, cut_rows, id_dtype, permute_rows

__all__ = ['NAME', 'IndexOrder', 'feistel_permute', 'steps']

NAME = 'index'
_ROUNDS = 4
_TAG = 0x1D5E  # Separates this shuffle's random streams from the reference's seed streams.
_CHUNK = 1 << 20  # Positions computed at a time when a whole epoch is asked for.
_U64 = np.uint64
_GOLDEN, _MIX1, _MIX2 = _U64(0x9E3779B97F4A7C15), _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_ROW_SALT, _BLOCK_SALT = _U64(0xD6E8FEB86659FD93), _U64(0xA0761D6478BD642F)


def _mix(z: np.ndarray) -> np.ndarray:
    """A 64-bit finaliser (splitmix64's): every output bit depends on every input bit."""
    z = (z ^ (z >> _U64(30))) * _MIX1
    z = (z ^ (z >> _U64(27))) * _MIX2
    return z ^ (z >> _U64(31))


def feistel_permute(values: np.ndarray, sizes: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``perm_k(v)`` for each value: a bijection of ``range(size)`` chosen by ``keys[:, k]``.

    ``values``, ``sizes``: int64 arrays (``0 <= values < sizes``); ``keys``: uint64 of shape
    ``(len(values), rounds)``. Each half of the Feistel domain has ``h`` bits, ``4 ** h`` the
    smallest power of four ``>= size``; results at or past ``size`` are permuted again (cycle
    walking) until they fall inside, which keeps the map a bijection of ``range(size)``.
    """
    out = np.asarray(values, np.int64).astype(_U64)
    sizes = np.asarray(sizes, np.int64)
    bits = np.maximum(np.ceil(np.log2(np.maximum(sizes, 2))).astype(np.int64), 1)
    half = ((bits + 1) // 2).astype(_U64)
    mask = (_U64(1) << half) - _U64(1)
    todo = np.arange(len(out))
    while len(todo):
        x, h, m, k = out[todo], half[todo], mask[todo], keys[todo]
        left, right = x >> h, x & m
        for r in range(k.shape[1]):
            left, right = right, left ^ (_mix((right + k[:, r]) * _GOLDEN) & m)
        x = (left << h) | right
        out[todo] = x
        todo = todo[x >= sizes[todo].astype(_U64)]
    return out.astype(np.int64)


class IndexOrder:
    """The ``index`` order of one epoch: ``at(positions)`` gives the unit position read there.

    Built from the units in O(units); holds the rows' span tables and per-row staggers only.
    ``span_value`` (default: each span's first unit position) may instead give each span's first
    *sample id* when every unit is a run of consecutive samples: then ``at`` yields sample ids.
    """

    def __init__(self, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                 block_size: int, unit_values: np.ndarray | None = None) -> None:
        sizes = np.asarray(unit_sizes, np.int64)
        self.num_samples = total = int(sizes.sum())
        self.block_size = max(int(block_size), 1)
        run_rng = np.random.default_rng([seed, _TAG])
        epoch_rng = np.random.default_rng([seed, epoch, _TAG])
        begin = np.zeros(len(sizes), np.int64)
        np.cumsum(sizes[:-1], out=begin[1:])
        order = run_rng.permutation(len(sizes))
        spans = permute_rows(cut_rows(begin[order], sizes[order], num_canonical_nodes),
                             epoch_rng)
        self.span_start = np.zeros(len(spans.length) + 1, np.int64)
        np.cumsum(spans.length, out=self.span_start[1:])
        value = spans.begin
        if unit_values is not None:  # Unit position -> its own value (a sample id), per span.
            unit = np.searchsorted(begin, spans.begin, 'right') - 1
            value = np.asarray(unit_values, np.int64)[unit] + (spans.begin - begin[unit])
        self.span_value = value
        rows = np.arange(num_canonical_nodes + 1, dtype=np.int64)
        self.row_start = total * rows // num_canonical_nodes
        self.stagger = epoch_rng.integers(0, self.block_size, num_canonical_nodes)
        self.keys = epoch_rng.integers(0, 1 << 63, _ROUNDS, dtype=np.int64).astype(_U64)

    def __len__(self) -> int:
        return self.num_samples

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The unit position (or sample id, see the class) read at each epoch position."""
        p = np.asarray(positions, np.int64)
        row = np.searchsorted(self.row_start, p, 'right') - 1
        start = self.row_start[row]
        length = self.row_start[row + 1] - start
        shifted = p - start + self.stagger[row]
        block = shifted // self.block_size
        first = np.maximum(block * self.block_size - self.stagger[row], 0)
        last = np.minimum((block + 1) * self.block_size - self.stagger[row], length)
        salt = (row.astype(_U64) * _ROW_SALT) ^ (block.astype(_U64) * _BLOCK_SALT)
        keys = _mix(salt[:, None] ^ self.keys[None, :])
        inside = feistel_permute(p - start - first, last - first, keys)
        source = start + first + inside
        span = np.searchsorted(self.span_start, source, 'right') - 1
        return self.span_value[span] + (source - self.span_start[span])

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        return self.at(positions)


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The whole epoch's positions, a chunk at a time (the registry's incremental form)."""
    order = IndexOrder(unit_sizes, num_canonical_nodes, seed, epoch, block_size)
    total = len(order)
    out = fresh_array(total, id_dtype(total))
    yield out
    for start in range(0, total, _CHUNK):
        stop = min(start + _CHUNK, total)
        out[start:stop] = order.at(np.arange(start, stop, dtype=np.int64))
        yield stop
    yield total
