"""``py1s``: the reference's span shuffle: every span's samples shuffled, span after span.

The spans are those of ``rows`` in their epoch order.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.shuffles.rows import FinalParts, shuffle_each, spans_in_order

__all__ = ['steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The output array, then how much of it is final (all of it, at the end)."""
    out, spans, _, rng = spans_in_order(unit_sizes, num_canonical_nodes, seed, epoch)
    yield out
    shuffle_each(out, spans.length, rng)
    yield len(out)
