"""How many samples an epoch draws from each stream.

``apply_weights`` turns the user's stream weights into a per-stream count ("choose");
``stream_proportions`` is each stream's proportion as the reference records it. How a count is
spread over a stream's shards is ``resample``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ['SAMPLING_METHODS', 'apply_weights', 'stream_proportions']

SAMPLING_METHODS = ('balanced', 'fixed')


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
