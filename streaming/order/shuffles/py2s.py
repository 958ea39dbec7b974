"""``py2s``: the reference's two-pass span shuffle, row by row.

Before cutting the rows (see ``rows``), the run generator also shuffles every unit's samples;
then, row by row, the epoch generator permutes the row's spans and shuffles each span's samples.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.shuffles.rows import (
    FinalParts,
    cut_rows,
    id_dtype,
    permuted_units,
    ragged_arange,
    shuffle_each,
)

__all__ = ['steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The output array, then how much of it is final, row by row."""
    unit_begin, sizes, run_rng = permuted_units(unit_sizes, seed)
    total = int(sizes.sum())
    dtype = id_dtype(total)
    epoch_rng = np.random.default_rng(seed + epoch)
    source = ragged_arange(unit_begin, sizes, dtype)
    shuffle_each(source, sizes, run_rng)
    laid = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=laid[1:])
    spans = cut_rows(laid, sizes, num_canonical_nodes)
    out = np.empty(total, dtype)
    yield out
    written = 0
    for row in range(spans.num_rows):
        part = spans.row(row)
        picked = epoch_rng.permutation(part.stop - part.start)
        begin, length = spans.begin[part][picked], spans.length[part][picked]
        chunk = source[ragged_arange(begin, length)]
        shuffle_each(chunk, length, epoch_rng)
        out[written:written + len(chunk)] = chunk
        written += len(chunk)
        yield written
    yield total
