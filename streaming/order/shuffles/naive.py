"""``naive``: one permutation of the whole epoch by the epoch generator (``seed + epoch``)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.shuffles.rows import FinalParts, id_dtype

__all__ = ['steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The permutation, then its length (all final)."""
    total = int(np.asarray(unit_sizes, np.int64).sum())
    yield np.random.default_rng(seed + epoch).permutation(total).astype(id_dtype(total),
                                                                        copy=False)
    yield total
