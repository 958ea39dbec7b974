"""The reference's ``streaming.base.sampling``: how many samples an epoch takes from each shard."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from streaming.order.resample import choose_per_shard

__all__ = ['get_sampling']


def get_sampling(samples_per_shard: NDArray[np.int64], choose: int, granularity: int, seed: int,
                 epoch: int, use_epoch: bool) -> NDArray[np.int64]:
    """Samples to take from each shard of one stream so that ``choose`` are taken in all.

    Whole multiples of the stream take every shard that many times; the rest is spread over the
    shards in runs of ``granularity`` samples, drawn anew each epoch if ``use_epoch`` (the
    ``balanced`` sampling method) or the same every epoch (``fixed``): the reference's counts,
    draw for draw.
    """
    return choose_per_shard(np.asarray(samples_per_shard, np.int64), int(choose), granularity,
                            seed, epoch, use_epoch)
