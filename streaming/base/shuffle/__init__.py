"""The reference's ``streaming.base.shuffle``: one epoch's permutation of sample positions.

The built-in algorithms are the reference's permutations exactly (``streaming.order.spans``;
``py1b``, which the reference dropped, is ours). A shuffle registered under a new name fills
position ranges ``[N*c//C, N*(c+1)//C)`` with canonical node ``c``'s row of our layout
(``streaming.order.layout``), so each node reads only its own shards.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import NDArray

from streaming.order.layout import canonical_layout
from streaming.order.sampling import draw_shards
from streaming.order.spans import EXACT_SHUFFLE_ALGOS
from streaming.order.spans import shuffle_positions as exact_positions

__all__ = ['algos', 'get_shuffle', 'get_shuffle_naive', 'get_shuffle_py1br', 'get_shuffle_py1e',
           'get_shuffle_py1s', 'get_shuffle_py2s']


def shuffle_positions(algo: str, shard_sizes: NDArray[np.int64], num_canonical_nodes: int,
                      seed: int, epoch: int, block_size: int = 1 << 18) -> NDArray[np.int64]:
    """Positions ``0 .. sum(shard_sizes) - 1`` in the order ``algo`` reads them."""
    sizes = np.asarray(shard_sizes, np.int64)
    if algo in EXACT_SHUFFLE_ALGOS:
        return exact_positions(algo, sizes, num_canonical_nodes, seed, epoch,
                               block_size).astype(np.int64)
    draw = draw_shards(sizes, np.zeros(len(sizes), np.int64), np.array([sizes.sum()]),
                       seed=seed, epoch=epoch)
    layout = canonical_layout(draw, np.arange(len(sizes)), num_canonical_nodes=num_canonical_nodes,
                              shuffle=True, shuffle_algo=algo, block_size=block_size, seed=seed,
                              epoch=epoch)
    rows = [layout.rows[row, :length] for row, length in enumerate(layout.lengths.tolist())]
    return np.concatenate(rows).astype(np.int64) if rows else np.empty(0, np.int64)


def _named(algo: str) -> Callable[..., NDArray[np.int64]]:
    def shuffle(shard_sizes: NDArray[np.int64], num_canonical_nodes: int, seed: int, epoch: int,
                block_size: int = 1 << 18) -> NDArray[np.int64]:
        return shuffle_positions(algo, shard_sizes, num_canonical_nodes, seed, epoch, block_size)
    shuffle.__name__ = shuffle.__qualname__ = f'get_shuffle_{algo}'
    shuffle.__doc__ = f'The ``{algo}`` shuffle of an epoch (see ``streaming.order.shuffle``).'
    return shuffle


get_shuffle_naive = _named('naive')
get_shuffle_py1br = _named('py1br')
get_shuffle_py1e = _named('py1e')
get_shuffle_py1s = _named('py1s')
get_shuffle_py2s = _named('py2s')

algos: dict[str, Callable[..., NDArray[np.int64]]] = {
    'naive': get_shuffle_naive, 'py1b': _named('py1b'), 'py1br': get_shuffle_py1br,
    'py1e': get_shuffle_py1e, 'py1s': get_shuffle_py1s, 'py2s': get_shuffle_py2s,
}


def get_shuffle(algo: str, shard_sizes: NDArray[np.int64], num_canonical_nodes: int, seed: int,
                epoch: int, block_size: int = 1 << 18) -> NDArray[np.int64]:
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
