"""``py1b`` (ours; the reference dropped it in 0.11): fixed blocks shuffled in turn.

Spans in their epoch order (see ``rows``), then fixed blocks of ``block`` samples of each row,
each shuffled by the epoch generator.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.shuffles.rows import FinalParts, spans_in_order

__all__ = ['steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The output array, then how much of it is final, row by row."""
    out, spans, row_starts, rng = spans_in_order(unit_sizes, num_canonical_nodes, seed, epoch)
    yield out
    for row in range(spans.num_rows):
        stop = int(row_starts[row + 1])
        _blocks_row(out[int(row_starts[row]):stop], block_size, rng)
        yield stop
    yield len(out)


def _blocks_row(ids: np.ndarray, block_size: int, rng: np.random.Generator) -> None:
    for start in range(0, len(ids), block_size):
        rng.shuffle(ids[start:start + block_size])
