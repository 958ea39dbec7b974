"""The reference's ``streaming.base.shuffle``: one epoch's permutation of sample positions.

``algos`` is the order engine's shuffle table itself (``streaming.order.shuffles.SHUFFLES``):
``algos['mine'] = fn``, with the reference's signature ``fn(shard_sizes, num_canonical_nodes,
seed, epoch, block_size) -> positions``, makes ``StreamingDataset(shuffle_algo='mine')`` use
``fn``, as in the reference. The built-ins are the reference's permutations exactly
(``streaming.order.shuffles.py1e`` and its siblings); ``py1b`` (which the reference dropped)
and ``index`` are ours.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from streaming.order.shuffles import MIN_SHUFFLE_BLOCK_SIZE, SHUFFLES

__all__ = ['algos', 'get_shuffle', 'get_shuffle_naive', 'get_shuffle_py1br', 'get_shuffle_py1e',
           'get_shuffle_py1s', 'get_shuffle_py2s']

algos = SHUFFLES
get_shuffle_naive = SHUFFLES['naive']
get_shuffle_py1br = SHUFFLES['py1br']
get_shuffle_py1e = SHUFFLES['py1e']
get_shuffle_py1s = SHUFFLES['py1s']
get_shuffle_py2s = SHUFFLES['py2s']


def get_shuffle(algo: str, shard_sizes: NDArray[np.int64], num_canonical_nodes: int, seed: int,
                epoch: int, block_size: int = MIN_SHUFFLE_BLOCK_SIZE) -> NDArray[np.int64]:
    """The permutation of one epoch's sample positions by the shuffle named ``algo``."""
    if algo not in algos:
        raise ValueError(f'Unknown shuffle algorithm {algo!r}; expected one of {list(algos)}.')
    return algos[algo](shard_sizes, num_canonical_nodes, seed, epoch, block_size)


def divide_spans(spans: list[tuple[int, int]], num_samples: int,
                 num_parts: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Cut ``(begin, end)`` spans, laid end to end, into ``num_parts`` parts.

    Part ``p`` ends at ``num_samples * (p + 1) // num_parts``. Returns the cut spans and, for
    each part, its ``(first, last)`` index range into them.
    """
    out: list[tuple[int, int]] = []
    parts: list[tuple[int, int]] = []
    spans = list(spans)
    position, i = 0, 0
    for part in range(num_parts):
        stop = num_samples * (part + 1) // num_parts
        first = len(out)
        while position < stop and i < len(spans):
            begin, end = spans[i]
            take = min(end - begin, stop - position)
            out.append((begin, begin + take))
            position += take
            if begin + take == end:
                i += 1
            else:
                spans[i] = (begin + take, end)
        parts.append((first, len(out)))
    return out, parts
