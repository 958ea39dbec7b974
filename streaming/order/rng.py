"""Seeded random generators, one independent stream per purpose.

Every generator is built from the user's seed plus a purpose tag (and, where the draw changes
each epoch, the epoch and a canonical node or stream index), so draws never collide across
purposes: unlike ``seed + epoch``, seed 1 epoch 0 and seed 0 epoch 1 differ.
"""

from __future__ import annotations

import numpy as np

__all__ = ['make_rng']

TAG_WEIGHTS = 1  # apply_weights: who gets the rounding shortfall
TAG_DRAW_FIXED = 2  # draw_shards with sampling_method='fixed'
TAG_DRAW_BALANCED = 3  # draw_shards with sampling_method='balanced'
TAG_SHARD_ORDER = 4  # which shards each canonical node owns (fixed for the run)
TAG_UNIT_PRESHUFFLE = 5  # py2s: run-level shuffle inside each unit
TAG_NODE_SHUFFLE = 6  # per canonical node, per epoch: span order, keys, block sizes
TAG_WHOLE_EPOCH = 7  # whole-epoch shuffles (naive): one global permutation per epoch
TAG_BATCH_ORIGINS = 8  # per_stream: which stream each global batch comes from
TAG_DEVICE_BATCHES = 9  # device_per_stream: order of device batches within a canonical node


def make_rng(seed: int, tag: int, *words: int) -> np.random.Generator:
    """A generator for ``tag`` under ``seed``, further keyed by non-negative ``words``."""
    return np.random.default_rng([int(seed), int(tag), *(int(word) for word in words)])
