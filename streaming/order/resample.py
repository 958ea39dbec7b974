"""The reference's per-epoch draw of samples from shards, exactly: shuffle units and big ids.

Each stream's count for the epoch (``choose``) is spread over its shards: whole passes give every
shard whole copies; the rest is cut into *granules* of ``sampling_granularity`` consecutive
samples per shard (the last one of a shard may be short), the granules are put in a random order
(``seed + epoch`` for ``balanced`` when shuffling, ``seed`` otherwise) and taken until the count
is met (the last one partly). A shard drawn ``q`` whole times plus ``r`` samples yields ``q``
whole-copy *units* and one unit of ``r`` samples, chosen at random without replacement and
sorted, from one generator shared by all streams. Units are laid end to end ("big ids");
``small`` maps big ids to sample ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ['Resampled', 'choose_per_shard', 'resample', 'whole_units']


def choose_per_shard(shard_sizes: np.ndarray, choose: int, granularity: int, seed: int,
                     epoch: int, use_epoch: bool) -> np.ndarray:
    """Samples one stream's shards give this epoch."""
    sizes = np.asarray(shard_sizes, np.int64)
    total = int(sizes.sum())
    if not total:  # the reference divides by zero here; an empty stream gives nothing
        return np.zeros(len(sizes), np.int64)
    whole, rest = divmod(int(choose), total)
    counts = whole * sizes
    if not rest:
        return counts
    granules = -(-sizes // granularity)
    shard = np.repeat(np.arange(len(sizes)), granules)
    index = np.arange(len(shard)) - np.repeat(np.cumsum(granules) - granules, granules)
    granule_size = np.minimum(granularity, sizes[shard] - index * granularity)
    rng = np.random.default_rng(seed + epoch if use_epoch else seed)
    order = rng.permutation(len(shard))
    shard, granule_size = shard[order], granule_size[order]
    reached = np.cumsum(granule_size)
    last = int(np.searchsorted(reached, rest))
    taken = granule_size[:last + 1].copy()
    taken[last] = rest - (int(reached[last - 1]) if last else 0)
    counts += np.bincount(shard[:last + 1], taken, len(sizes)).astype(np.int64)
    return counts


@dataclass(frozen=True)
class Resampled:
    """One epoch's units (sizes, in reference order) and the sample id of every big id.

    ``small`` is None when big ids are sample ids (every stream drawn exactly once).
    """

    unit_sizes: np.ndarray
    small: np.ndarray | None
    num_samples: int

    def to_small(self, big: np.ndarray) -> np.ndarray:
        """Sample ids of big ids (-1 stays -1)."""
        if self.small is None:
            return big
        return np.where(big >= 0, self.small[np.maximum(big, 0)], -1)


def resample(shard_sizes: np.ndarray, shard_streams: np.ndarray, stream_choose: np.ndarray, *,
             seed: int, epoch: int, sampling_method: str, sampling_granularity: int,
             shuffle: bool = True, streams: list[int] | None = None) -> Resampled:
    """Units and big-id map of ``streams`` (default all), in stream then shard order."""
    sizes = np.asarray(shard_sizes, np.int64)
    owner = np.asarray(shard_streams, np.int64)
    balanced = sampling_method == 'balanced'
    rng = np.random.default_rng(seed + epoch if balanced else seed)
    bases = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=bases[1:])
    wanted = range(len(stream_choose)) if streams is None else streams
    members = [np.flatnonzero(owner == stream) for stream in wanted]
    per_epoch = balanced and shuffle
    counts = [choose_per_shard(sizes[shards], int(stream_choose[stream]), sampling_granularity,
                               seed, epoch, per_epoch) if len(shards) else np.zeros(0, np.int64)
              for stream, shards in zip(wanted, members)]
    shards = np.concatenate(members) if members else np.zeros(0, np.int64)
    count = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    shard_size = sizes[shards]
    copies = count // np.maximum(shard_size, 1)
    partial = count - copies * shard_size
    per_shard = copies + (partial > 0)
    unit_shard = np.repeat(shards, per_shard)
    unit_index = np.arange(len(unit_shard)) - np.repeat(np.cumsum(per_shard) - per_shard,
                                                        per_shard)
    unit_sizes = np.where(unit_index < copies[np.repeat(np.arange(len(shards)), per_shard)],
                          sizes[unit_shard], np.repeat(partial, per_shard))
    total = int(unit_sizes.sum())
    identity = (streams is None and bool((copies == 1).all()) and not partial.any()
                and bool((np.diff(shards) == 1).all()) and (not len(shards) or shards[0] == 0))
    if identity:
        return Resampled(unit_sizes, None, total)
    dtype = np.int32 if sizes.sum() < np.iinfo(np.int32).max else np.int64
    unit_ends = np.cumsum(unit_sizes)
    small = np.arange(total, dtype=dtype)
    small += np.repeat((bases[unit_shard] - (unit_ends - unit_sizes)).astype(dtype), unit_sizes)
    last_unit = np.cumsum(per_shard) - 1
    for index in np.flatnonzero(partial).tolist():  # the partial draws, in reference order
        shard, unit = int(shards[index]), int(last_unit[index])
        picks = np.sort(rng.choice(int(sizes[shard]), int(partial[index]), replace=False))
        end = int(unit_ends[unit])
        small[end - len(picks):end] = picks + bases[shard]
    return Resampled(unit_sizes, small, total)


def whole_units(shard_sizes: np.ndarray, shard_streams: np.ndarray,
                stream_choose: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``resample``'s units and each unit's first sample id, in O(shards).

    Only when every stream is drawn a whole number of times (the draw then needs no random
    number); else None.
    """
    sizes = np.asarray(shard_sizes, np.int64)
    owner = np.asarray(shard_streams, np.int64)
    choose = np.asarray(stream_choose, np.int64)
    totals = np.bincount(owner, sizes, len(choose)).astype(np.int64)
    if ((choose % np.maximum(totals, 1)) != 0).any() or ((totals == 0) & (choose > 0)).any():
        return None
    bases = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=bases[1:])
    shards = np.argsort(owner, kind='stable')  # Stream then shard order, as ``resample``.
    copies = np.where(sizes[shards] > 0, (choose // np.maximum(totals, 1))[owner[shards]], 0)
    unit_shard = np.repeat(shards, copies)
    return sizes[unit_shard], bases[unit_shard]
