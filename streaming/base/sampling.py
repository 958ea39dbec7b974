"""The reference's ``streaming.base.sampling``: how many samples an epoch takes from each shard."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from streaming.order.sampling import draw_shards

__all__ = ['get_sampling']


def get_sampling(samples_per_shard: NDArray[np.int64], choose: int, granularity: int, seed: int,
                 epoch: int, use_epoch: bool) -> NDArray[np.int64]:
    """Samples to take from each shard of one stream so that ``choose`` are taken in all.

    Whole multiples of the stream take every shard that many times; the rest is spread over the
    shards in runs of ``granularity`` samples, drawn anew each epoch if ``use_epoch`` (the
    ``balanced`` sampling method) or the same every epoch (``fixed``).
    """
    sizes = np.asarray(samples_per_shard, np.int64)
    draw = draw_shards(sizes, np.zeros(len(sizes), np.int64), np.array([choose], np.int64),
                       seed=seed, epoch=epoch,
                       sampling_method='balanced' if use_epoch else 'fixed',
                       sampling_granularity=granularity)
    return draw.copies * sizes + draw.remainder
