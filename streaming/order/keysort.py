"""Ordering a row's samples by random keys, a window at a time.

Every shuffle here is "give each sample a random key near its place, then read in key order".
Keys never stray more than half a window from where their interval lies, so the row can be
produced front to back: generate keys for the next intervals, and emit every sample whose key
no later interval can undercut. Only about a window of samples is held at once.

Keys and sample ids are packed into one uint64 (fixed-point key above, id below) and sorted
with numpy's vectorised sort; if an epoch is so large that the two do not fit in 64 bits with a
few bits of key fraction to spare, keys stay float64 beside their ids (slower, twice the memory).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ['interval_groups', 'place_by_keys']

# Samples whose keys are drawn per step, and held samples that trigger a sort.
_STEP = 1 << 18
_MAX_FLUSH = 1 << 23
_MIN_FRACTION_BITS = 3


def interval_groups(lengths: np.ndarray, size: int) -> np.ndarray:
    """Interval indices cutting consecutive intervals into groups of ``size`` samples or more.

    The last group may be smaller; the result starts with 0 and ends with ``len(lengths)``.
    """
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    cuts = np.searchsorted(ends, np.arange(size, total, size), 'left') + 1
    return np.unique(np.concatenate([[0], cuts, [len(lengths)]])).astype(np.int64)


class _PackedSink:
    """Collects (key, id) as one uint64 each; emits the sorted ids below a threshold.

    Keys are stored as fixed-point ``(key - origin) * 2**fraction_bits`` above the id.
    """

    def __init__(self, out: np.ndarray, id_bits: int, fraction_bits: int, origin: float) -> None:
        self.out, self.written, self.origin = out, 0, origin
        self.id_bits = np.uint64(id_bits)
        self.scale = float(1 << fraction_bits)
        self.held = np.empty(0, np.uint64)
        self.pieces: list[np.ndarray] = []
        self.pending = 0

    def add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        if self.origin:
            keys -= self.origin
        keys *= self.scale
        packed = keys.astype(np.uint64)
        packed <<= self.id_bits
        packed |= ids.astype(np.uint64, copy=False)
        self.pieces.append(packed)
        self.pending += len(packed)

    def flush(self, threshold: float) -> None:
        buffer = np.concatenate([self.held, *self.pieces])
        self.pieces, self.pending = [], 0
        buffer.sort()
        if threshold == np.inf:
            cut = len(buffer)
        elif threshold < self.origin:
            cut = 0
        else:
            limit = np.uint64(int((threshold - self.origin) * self.scale) + 1) << self.id_bits
            cut = int(np.searchsorted(buffer, limit, 'left'))
        emitted = buffer[:cut]
        emitted &= (np.uint64(1) << self.id_bits) - np.uint64(1)
        self.out[self.written:self.written + cut] = emitted
        self.written += cut
        self.held = buffer[cut:].copy()


class _PairSink:
    """Collects float64 keys beside their ids, for epochs too large to pack into 64 bits."""

    def __init__(self, out: np.ndarray) -> None:
        self.out, self.written = out, 0
        self.keys, self.ids = [np.empty(0)], [np.empty(0, out.dtype)]
        self.pending = 0

    def add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        self.keys.append(keys)
        self.ids.append(ids)
        self.pending += len(keys)

    def flush(self, threshold: float) -> None:
        keys, ids = np.concatenate(self.keys), np.concatenate(self.ids)
        ready = keys <= threshold
        self.keys, self.ids, self.pending = [keys[~ready]], [ids[~ready]], 0
        keys, ids = keys[ready], ids[ready]
        order = np.lexsort((np.arange(len(keys)), keys))
        self.out[self.written:self.written + len(keys)] = ids[order]
        self.written += len(keys)

    @property
    def held(self) -> np.ndarray:
        return self.keys[0]


def place_by_keys(out: np.ndarray, read: Callable[[int, int], np.ndarray], lengths: np.ndarray,
                  widths: np.ndarray, rng: np.random.Generator, *, reflect: bool, id_bits: int,
                  packed: bool | None = None) -> None:
    """Write into ``out`` the samples of consecutive intervals, in order of random keys.

    Interval ``i`` has ``lengths[i]`` samples (``read(i, j)`` returns the ids of intervals
    ``i..j-1`` end to end) and occupies ``[start_i, start_i + lengths[i])`` of ``out``. Each of
    its samples gets a key uniform over a window of ``widths[i]`` centred on the interval; with
    ``reflect`` keys falling outside ``[0, len(out)]`` are folded back in, as off a mirror. With
    ``widths == lengths`` this shuffles each interval in place. ``id_bits`` bounds the ids' bit
    length; ``packed`` forces (True) or forbids (False) the packed uint64 sort.
    """
    total = len(out)
    if total == 0:
        return
    lengths = np.asarray(lengths, np.int64)
    lows = np.cumsum(lengths) - lengths + (lengths - widths) / 2
    highs = lows + widths
    later_low = np.append(np.minimum.accumulate(lows[::-1])[::-1], np.inf)
    origin = 0.0 if reflect else min(0.0, float(lows.min()))  # keys are never below origin
    top = total if reflect else max(total, float(highs.max()))
    fraction_bits = 62 - id_bits - int(np.ceil(top - origin)).bit_length()
    if packed is None:
        packed = fraction_bits >= _MIN_FRACTION_BITS
    if packed:
        sink = _PackedSink(out, id_bits, max(fraction_bits, 0), origin)
    else:
        sink = _PairSink(out)
    flush_at = int(np.clip(total // 8, _STEP, _MAX_FLUSH))
    cuts = interval_groups(lengths, _STEP)
    for first, last in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        ids = read(first, last)
        keys = rng.random(len(ids))
        keys *= np.repeat(widths[first:last], lengths[first:last])
        keys += np.repeat(lows[first:last], lengths[first:last])
        if reflect and (lows[first:last].min() < 0 or highs[first:last].max() > total):
            np.mod(keys, 2 * total, out=keys)  # fold onto [0, total] like a triangle wave
            keys -= total
            np.abs(keys, out=keys)
            np.subtract(total, keys, out=keys)
        sink.add(keys, ids)
        if sink.pending >= flush_at or last == len(lengths):
            sink.flush(later_low[last])
    assert sink.written == total and not len(sink.held), 'keys escaped their window'
