"""``py1s``: the reference's span shuffle: every span's samples shuffled, span after span.

The spans are those of ``rows`` in their epoch order.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.shuffles.rows import (
    FinalParts,
    id_dtype,
    ragged_arange,
    rows_of_units,
    shuffle_each,
)

__all__ = ['steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The output array, then how much of it is final (all of it, at the end)."""
    spans, _, rng = rows_of_units(unit_sizes, num_canonical_nodes, seed, epoch)
    total = int(spans.length.sum())
    out = ragged_arange(spans.begin, spans.length, id_dtype(total))
    yield out
    shuffle_each(out, spans.length, rng)
    yield total
