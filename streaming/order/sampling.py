"""How many samples an epoch draws from each stream, and which ones from each shard.

``apply_weights`` turns the user's stream weights into a per-stream count ("choose");
``draw_shards`` spreads each stream's count over its shards: every shard is taken whole as often
as the count allows, and what is left is a random subset drawn shard by shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streaming.order.checks import check_choice, check_int
from streaming.order.rng import TAG_DRAW_BALANCED, TAG_DRAW_FIXED, make_rng

__all__ = ['SAMPLING_METHODS', 'ShardDraw', 'apply_weights', 'draw_shards', 'stream_proportions']

SAMPLING_METHODS = ('balanced', 'fixed')

# Shards are subsampled in groups of about this many samples, to bound temporary memory.
_SUBSET_CHUNK = 1 << 22


def _check_weights(name: str, values: Sequence[float | None] | None, count: int) -> list:
    if values is None:
        return [None] * count
    values = list(values)
    if len(values) != count:
        raise ValueError(f'`{name}` has {len(values)} entries but there are {count} streams')
    for index, value in enumerate(values):
        if value is not None and not value >= 0:
            raise ValueError(f'`{name}` of stream {index} must be non-negative, got {value}')
    return values


def _split(total: int, weights: list[float], seed: int) -> np.ndarray:
    """Split ``total`` in proportion to ``weights``, as the reference does.

    Each share is ``total * weight / sum`` in float64, truncated; the shortfall goes one sample
    each to distinct streams drawn (from all streams) by ``default_rng(seed)``.
    """
    shares = np.asarray(weights, np.float64)
    if not shares.sum() > 0:
        raise ValueError('stream weights sum to zero: at least one stream needs a positive weight')
    shares = shares / shares.sum()
    counts = (total * shares).astype(np.int64)
    shortfall = total - int(counts.sum())
    if shortfall:
        counts[np.random.default_rng(seed).choice(len(counts), shortfall, replace=False)] += 1
    return counts


def apply_weights(stream_sizes: np.ndarray, *, proportion: Sequence[float | None] | None = None,
                  repeat: Sequence[float | None] | None = None,
                  choose: Sequence[int | None] | None = None, epoch_size: int | None = None,
                  seed: int) -> np.ndarray:
    """Samples to draw from each stream per epoch, from the streams' weights.

    Relative weights (``proportion`` given for every stream) are normalised and split
    ``epoch_size`` (default: the total of ``stream_sizes``). With no weights at all, an
    ``epoch_size`` is split in proportion to stream size. Absolute weights take ``int(repeat *
    size)``, ``choose``, or the whole stream; the epoch is then their sum and ``epoch_size`` is an
    error. Shares are truncated float64 products (as in the reference), and the shortfall goes
    one sample each to distinct streams picked by ``numpy.random.default_rng(seed)``.
    """
    sizes = np.asarray(stream_sizes, dtype=np.int64)
    if sizes.ndim != 1 or (sizes < 0).any():
        raise ValueError(f'`stream_sizes` must be a 1-D array of non-negative ints, got {sizes}')
    count = len(sizes)
    proportion = _check_weights('proportion', proportion, count)
    repeat = _check_weights('repeat', repeat, count)
    choose = _check_weights('choose', choose, count)
    for index in range(count):
        given = [name for name, values in (('proportion', proportion), ('repeat', repeat),
                                           ('choose', choose)) if values[index] is not None]
        if len(given) > 1:
            raise ValueError(f'stream {index} has {" and ".join(given)}: give at most one of '
                             '`proportion`, `repeat` and `choose`; the others are derived')
    if epoch_size is not None and epoch_size < 0:
        raise ValueError(f'`epoch_size` must be non-negative, got {epoch_size}')
    relative = [index for index in range(count) if proportion[index] is not None]
    if relative:
        if len(relative) != count:
            absolute = sorted(set(range(count)) - set(relative))
            raise ValueError(
                'relative (`proportion`) and absolute (`repeat`, `choose`, or no weight) stream '
                f'weights cannot be mixed: streams {relative} have `proportion` but streams '
                f'{absolute} do not')
        total = int(sizes.sum()) if epoch_size is None else int(epoch_size)
        return _split(total, [float(value) for value in proportion], seed)
    if epoch_size is not None:
        weighted = [index for index in range(count)
                    if repeat[index] is not None or choose[index] is not None]
        if weighted:
            raise ValueError(
                f'`epoch_size` cannot be combined with absolute weights (`repeat`/`choose`, given '
                f'for streams {weighted}); use `proportion` on every stream, or drop `epoch_size`')
        if int(sizes.sum()) == 0 and epoch_size > 0:
            raise ValueError(f'`epoch_size`={epoch_size} but every stream is empty')
        return _split(int(epoch_size), [float(size) for size in sizes], seed)
    counts = sizes.copy()
    for index in range(count):
        if repeat[index] is not None:
            counts[index] = int(float(repeat[index]) * int(sizes[index]))
        elif choose[index] is not None:
            if int(choose[index]) != choose[index]:
                raise ValueError(f'`choose` of stream {index} must be an int, got {choose[index]}')
            counts[index] = int(choose[index])
    return counts


def stream_proportions(stream_sizes: np.ndarray, stream_choose: np.ndarray, *,
                       proportion: Sequence[float | None] | None = None,
                       epoch_size: int | None = None) -> np.ndarray:
    """Each stream's ``proportion`` as the reference records it after weighting.

    The normalised ``proportion`` weights when given; with no weights but an ``epoch_size``, the
    streams' shares of all samples; otherwise each stream's share of ``stream_choose``. The
    non-random batching methods size each stream's part of a batch and its shuffle block by it.
    """
    if proportion is not None and len(proportion) and proportion[0] is not None:
        shares = np.array([float(value) for value in proportion], np.float64)
    elif epoch_size is not None:
        shares = np.asarray(stream_sizes, np.int64).astype(np.float64)
    else:
        shares = np.asarray(stream_choose, np.int64).astype(np.float64)
    total = shares.sum()
    return shares / total if total else np.zeros(len(shares))


@dataclass(frozen=True)
class ShardDraw:
    """What one epoch takes from each shard: whole copies, plus a sorted subset of the rest.

    ``subset_offsets[subset_starts[s]:subset_starts[s + 1]]`` are the in-shard offsets of shard
    ``s``'s partial draw (``remainder[s]`` of them, always fewer than the shard's size).
    """

    shard_sizes: np.ndarray
    copies: np.ndarray
    remainder: np.ndarray
    subset_starts: np.ndarray
    subset_offsets: np.ndarray

    @property
    def total(self) -> int:
        return int((self.copies * self.shard_sizes).sum() + self.remainder.sum())


def _spread_remainder(sizes: np.ndarray, remainder: int, granularity: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Spread ``remainder`` samples over shards of ``sizes``, in granules of ``granularity``.

    Granules (the last of a shard may be short) are drawn without replacement; the total is then
    made exact by trimming or topping up shards visited in random order.
    """
    granules = -(-sizes // granularity)
    wanted = -(-remainder // granularity)
    picked = rng.multivariate_hypergeometric(granules, wanted, method='marginals')
    counts = np.minimum(picked * granularity, sizes)
    excess = int(counts.sum()) - remainder
    if excess:
        room = counts if excess > 0 else sizes - counts
        order = rng.permutation(np.flatnonzero(room))
        available = room[order]
        before = np.cumsum(available) - available
        change = np.clip(abs(excess) - before, 0, available)
        counts[order] -= np.sign(excess) * change
    return counts


def _random_subsets(sizes: np.ndarray, counts: np.ndarray, rng: np.random.Generator,
                    out: np.ndarray, slots: np.ndarray) -> None:
    """Write sorted uniform random subsets, ``counts[i]`` distinct offsets below ``sizes[i]``.

    Shard ``i``'s subset goes to ``out[slots[i]:slots[i] + counts[i]]``. Every sample gets a
    random key packed with its shard and offset into one uint64; one sort per chunk of shards then
    ranks the keys within each shard, and the lowest ``counts[i]`` win.
    """
    start = 0
    cumulative = np.cumsum(sizes)
    while start < len(sizes):
        base = cumulative[start] - sizes[start]
        stop = max(start + 1, int(np.searchsorted(cumulative, base + _SUBSET_CHUNK, 'right')))
        found = _subsets_of_chunk(sizes[start:stop], counts[start:stop], rng)
        lengths = counts[start:stop]
        where = np.repeat(slots[start:stop] - (np.cumsum(lengths) - lengths), lengths)
        out[where + np.arange(len(found))] = found
        start = stop


def _subsets_of_chunk(sizes: np.ndarray, counts: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """The subsets of a chunk of shards, end to end.

    A chunk holds at most ``_SUBSET_CHUNK`` samples or a single shard, so shard and offset take
    at most about 44 bits and at least 20 bits of random key remain.
    """
    total = int(sizes.sum())
    shard_bits = max(1, int(len(sizes) - 1).bit_length())
    offset_bits = max(1, int(sizes.max() - 1).bit_length())
    key_bits = 64 - shard_bits - offset_bits
    shard = np.repeat(np.arange(len(sizes)), sizes)
    offsets = np.arange(total, dtype=np.int64)
    offsets -= (np.cumsum(sizes) - sizes)[shard]
    packed = rng.integers(0, 1 << key_bits, total, dtype=np.uint64)
    packed <<= np.uint64(offset_bits)
    packed |= offsets.astype(np.uint64)
    packed |= shard.astype(np.uint64) << np.uint64(key_bits + offset_bits)
    packed.sort()
    keep = offsets < counts[shard]  # rank within its shard, as sorting keeps shards in place
    chosen = packed[keep]
    offset_mask = np.uint64((1 << offset_bits) - 1)
    shard_of = chosen >> np.uint64(key_bits + offset_bits)
    chosen &= offset_mask
    chosen |= shard_of << np.uint64(offset_bits)
    chosen.sort()
    chosen &= offset_mask
    return chosen


def draw_shards(shard_sizes: np.ndarray, shard_streams: np.ndarray, stream_choose: np.ndarray, *,
                seed: int, epoch: int, sampling_method: str = 'balanced',
                sampling_granularity: int = 1) -> ShardDraw:
    """Decide what an epoch takes from each shard, given the samples to draw per stream.

    A stream drawn ``q`` whole times plus ``r`` extra samples gives each of its shards ``q`` whole
    copies, and spreads ``r`` over its shards in granules of ``sampling_granularity`` samples,
    each shard contributing a sorted random subset. ``balanced`` draws anew every epoch;
    ``fixed`` draws the same shards and samples every epoch.
    """
    check_choice('sampling_method', sampling_method, SAMPLING_METHODS)
    check_int('sampling_granularity', sampling_granularity, 1)
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    streams = np.asarray(shard_streams, dtype=np.int64)
    choose = np.asarray(stream_choose, dtype=np.int64)
    copies = np.zeros(len(sizes), np.int64)
    remainder = np.zeros(len(sizes), np.int64)
    partial_draws: list[tuple[np.ndarray, np.random.Generator]] = []
    for stream, wanted in enumerate(choose.tolist()):
        members = np.flatnonzero(streams == stream)
        stream_size = int(sizes[members].sum())
        if stream_size == 0:
            if wanted:
                raise ValueError(f'stream {stream} has no samples but {wanted} are to be drawn')
            continue
        whole, extra = divmod(wanted, stream_size)
        copies[members] = whole
        if not extra:
            continue
        if sampling_method == 'fixed':
            rng = make_rng(seed, TAG_DRAW_FIXED, stream)
        else:
            rng = make_rng(seed, TAG_DRAW_BALANCED, stream, epoch)
        counts = _spread_remainder(sizes[members], extra, sampling_granularity, rng)
        full = counts == sizes[members]
        copies[members[full]] += 1
        counts[full] = 0
        remainder[members] = counts
        partial_draws.append((members[counts > 0], rng))
    starts = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(remainder, out=starts[1:])
    offset_type = np.uint32 if len(sizes) == 0 or sizes.max() <= 1 << 32 else np.int64
    offsets = np.empty(int(starts[-1]), offset_type)
    for partial, rng in partial_draws:  # then each stream's subsets, straight to their slots
        _random_subsets(sizes[partial], remainder[partial], rng, offsets, starts[partial])
    return ShardDraw(sizes, copies, remainder, starts, offsets)
