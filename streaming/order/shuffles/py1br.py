"""``py1br``: the reference's staggered random-block shuffle, sample for sample.

After all rows' span permutations (see ``rows``), the epoch generator draws one *stagger* per row
(``[0, 0.75 * block)``); then, row by row, it draws block sizes from ``[0.75 * block,
1.25 * block)`` until they cover the row, the first block shortened by the stagger (the first
few blocks all start at the row's start, so they overlap), and shuffles the blocks in turn.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from streaming.order.shuffles.rows import FinalParts, RowSpans, spans_in_order

__all__ = ['py1br_blocks', 'steps']


def steps(unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
          block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """The output array, then how much of it is final (all of it, at the end)."""
    out, spans, row_starts, rng = spans_in_order(unit_sizes, num_canonical_nodes, seed, epoch)
    yield out
    _py1br_rows(out, spans, row_starts, block_size, rng)
    yield len(out)


def py1br_blocks(length: int, stagger: int, block_size: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The py1br blocks ``(starts, stops)`` of a row of ``length``; sizes are drawn from ``rng``.

    A running end ``e`` (from 0) gives block ``[max(e - stagger, 0), min(e + size - stagger,
    length))`` and grows by that block's length until it reaches ``length``. While ``e < stagger``
    blocks start at 0 (at most ``stagger.bit_length() + 1`` of them, as ``e`` more than doubles);
    after that they follow one another. Sizes are drawn in one call (numpy draws the same values
    one by one or at once), as many as the blocks use.
    """
    low, high = int(0.75 * block_size), int(1.25 * block_size)
    bound = length // low + stagger.bit_length() + 4
    probe = np.random.Generator(type(rng.bit_generator)())
    probe.bit_generator.state = rng.bit_generator.state
    sizes = probe.integers(low, high, bound)
    starts, stops = [], []
    end, used = 0, 0
    while end < length and end < stagger:
        start, stop = 0, min(end + int(sizes[used]) - stagger, length)
        starts.append(start)
        stops.append(stop)
        end += stop - start
        used += 1
    if end < length:
        ends = (end - stagger) + np.cumsum(sizes[used:])
        count = int(np.searchsorted(ends, length - stagger, 'left')) + 1
        starts.extend([end - stagger] + ends[:count - 1].tolist())
        stops.extend(np.minimum(ends[:count], length).tolist())
        used += count
    rng.integers(low, high, used)  # advance the real generator past the sizes used
    return np.array(starts, np.int64), np.array(stops, np.int64)


def _py1br_rows(ids: np.ndarray, spans: RowSpans, row_starts: np.ndarray, block_size: int,
                rng: np.random.Generator) -> None:
    """Shuffle every row of ``ids`` in place the py1br way (one stagger per row, then blocks)."""
    if int(0.75 * block_size) < 1:
        raise ValueError(f"shuffle_algo='py1br' needs a shuffle block size of at least 2 (its "
                         f'blocks are 0.75-1.25 x the block size), got {block_size}')
    staggers = rng.integers(0, int(0.75 * block_size), spans.num_rows).tolist()
    for row, stagger in enumerate(staggers):
        row_ids = ids[row_starts[row]:row_starts[row + 1]]
        starts, stops = py1br_blocks(len(row_ids), stagger, block_size, rng)
        for start, stop in zip(starts.tolist(), stops.tolist()):
            rng.shuffle(row_ids[start:stop])
