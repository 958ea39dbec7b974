"""Shuffle algorithms: a registry, and the built-in ones registered in it.

A shuffle decides the order of the samples inside one canonical node's *row* (see ``layout``):
it gets the row as a ``CanonicalRow`` (runs of consecutive sample ids, each from one shard) and
writes a permutation of those ids into ``out``. Everything else (which shards a node owns, how
rows become batches and devices) is shared by all algorithms. The built-ins:

* ``py1s``: the row's spans in random order, samples shuffled within each span;
* ``py2s``: like py1s, after a run-level shuffle inside every unit (so a unit cut by a row
  boundary splits into two random halves rather than two contiguous ones);
* ``py1b``: spans in random order, then samples shuffled within fixed blocks of ``block_size``;
* ``py1br``: the same with block sizes drawn from [0.75, 1.25) x ``block_size`` and a random
  first block (stagger), so block edges differ between nodes and epochs;
* ``py1e`` (default): spans in random order, then every sample is sent to a uniformly random
  place in a window of about ``block_size`` centred on its span (reflected at the row ends), and
  the row is read in order of those places. Spans overlap smoothly instead of meeting at block
  edges, and no sample moves more than about ``block_size / 2`` from its span;
* ``naive``: one uniform permutation of the whole epoch, ignoring shards and nodes (a
  whole-epoch shuffle: it gets every id at once instead of one row at a time).

All but ``naive`` come down to sorting by random keys (see ``keysort``), done a window at a time,
so memory beyond the rows themselves is bounded by the window, not the epoch. A new algorithm is
one ``register_shuffle`` call (see ``docs/extending/shuffle.md``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from streaming.order.checks import check_choice, check_int
from streaming.order.keysort import interval_groups, place_by_keys
from streaming.order.units import SpanSource

__all__ = ['CanonicalRow', 'EpochShuffle', 'RowShuffle', 'ShuffleAlgo',
           'default_num_canonical_nodes', 'default_shuffle_block_size', 'get_shuffle',
           'register_shuffle', 'shuffle_names', 'unregister_shuffle']

# Samples handled per step when filling a row (bounds temporary memory).
_CHUNK = 1 << 21


class CanonicalRow:
    """One canonical node's share of an epoch: spans of sample ids, in row order.

    Span ``i`` is ``length[i]`` consecutive samples of one unit (a whole shard, or a shard's
    drawn subset). ``read(first, last)`` returns the ids of spans ``first..last-1`` end to end;
    ids are below ``2 ** id_bits``.
    """

    def __init__(self, source: SpanSource, unit: np.ndarray, begin: np.ndarray,
                 length: np.ndarray, id_bits: int) -> None:
        self.source, self.unit, self.begin, self.length = source, unit, begin, length
        self.id_bits = id_bits

    @property
    def num_spans(self) -> int:
        return len(self.length)

    @property
    def num_samples(self) -> int:
        return int(self.length.sum())

    def read(self, first: int, last: int) -> np.ndarray:
        """The ids of spans ``first..last-1``, end to end."""
        return self.source(self.unit[first:last], self.begin[first:last],
                           self.length[first:last])

    def take(self, order: np.ndarray) -> CanonicalRow:
        """These spans in the order ``order`` (e.g. ``rng.permutation(row.num_spans)``)."""
        return CanonicalRow(self.source, self.unit[order], self.begin[order], self.length[order],
                        self.id_bits)

    def write_to(self, out: np.ndarray) -> None:
        """Write every span's ids into ``out`` end to end, a bounded chunk at a time."""
        cuts = interval_groups(self.length, _CHUNK)
        written = 0
        for first, last in zip(cuts[:-1], cuts[1:]):
            ids = self.read(first, last)
            out[written:written + len(ids)] = ids
            written += len(ids)


# (row, out, block_size, rng): write a permutation of the row's ids into ``out``.
RowShuffle = Callable[[CanonicalRow, np.ndarray, int, np.random.Generator], None]
# (ids, rng): permute all of an epoch's ids in place.
EpochShuffle = Callable[[np.ndarray, np.random.Generator], None]


@dataclass(frozen=True)
class ShuffleAlgo:
    """A registered shuffle and what the rest of the order needs to know about it.

    Exactly one of ``shuffle_row`` (shuffles each canonical node's row) and ``shuffle_epoch``
    (permutes the whole epoch at once, ignoring nodes and shards) is set.
    ``uses_block_size``: whether ``shuffle_block_size`` matters (the dataset then caps it so
    one block's shards fit the cache). ``canonical_nodes_per_node``: the default
    ``num_canonical_nodes`` per physical node. ``shuffle_within_units``: shuffle each unit's
    samples (run-level) before rows are cut, as ``py2s`` does.
    """

    name: str
    shuffle_row: RowShuffle | None = None
    shuffle_epoch: EpochShuffle | None = None
    uses_block_size: bool = False
    canonical_nodes_per_node: int = 1
    shuffle_within_units: bool = False

    def __reduce__(self) -> tuple:
        # Unpickled in a process that lacks it (a spawned DataLoader worker whose parent
        # registered it in a script), an entry registers itself again.
        return _restore, (self.name, self.shuffle_row, self.shuffle_epoch, self.uses_block_size,
                          self.canonical_nodes_per_node, self.shuffle_within_units)


_registry: dict[str, ShuffleAlgo] = {}
_builtin: set[str] = set()
_lock = threading.Lock()


def register_shuffle(name: str, shuffle_row: RowShuffle | None = None, *,
                     shuffle_epoch: EpochShuffle | None = None, uses_block_size: bool = False,
                     canonical_nodes_per_node: int = 1,
                     shuffle_within_units: bool = False) -> ShuffleAlgo:
    """Make ``shuffle_algo=name`` use ``shuffle_row`` (or ``shuffle_epoch``); returns the entry.

    Register at import time of a module every process imports (DataLoader workers started by
    spawn import it again). Built-in names cannot be replaced; a custom one can, by registering
    it again.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f'register_shuffle: name must be a non-empty string, got {name!r}')
    if (shuffle_row is None) == (shuffle_epoch is None):
        raise ValueError(f'register_shuffle({name!r}): pass exactly one of shuffle_row and '
                         f'shuffle_epoch')
    check_int('canonical_nodes_per_node', canonical_nodes_per_node, 1)
    algo = ShuffleAlgo(name, shuffle_row, shuffle_epoch, uses_block_size,
                       canonical_nodes_per_node, shuffle_within_units)
    with _lock:
        if name in _builtin:
            raise ValueError(f'register_shuffle: {name!r} is a built-in shuffle and cannot be '
                             f'replaced; pick another name')
        _registry[name] = algo
    return algo


def unregister_shuffle(name: str) -> None:
    """Remove a custom shuffle (built-ins stay)."""
    with _lock:
        if name in _builtin:
            raise ValueError(f'unregister_shuffle: {name!r} is built in')
        _registry.pop(name, None)


def _restore(name: str, *fields: object) -> ShuffleAlgo:
    algo = _registry.get(name)
    if algo is None:
        with _lock:
            algo = _registry.setdefault(name, ShuffleAlgo(name, *fields))  # type: ignore[arg-type]
    return algo


def shuffle_names() -> tuple[str, ...]:
    """The registered shuffle names, sorted."""
    return tuple(sorted(_registry))


def get_shuffle(name: str) -> ShuffleAlgo:
    """The registered shuffle ``name``; ValueError naming ``shuffle_algo`` and the choices."""
    algo = _registry.get(name)
    if algo is None:
        check_choice('shuffle_algo', name, shuffle_names())
    return algo  # type: ignore[return-value]


def default_shuffle_block_size(num_canonical_nodes: int) -> int:
    """The reference's default: ``max(4_000_000 // num_canonical_nodes, 1 << 18)``."""
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


def default_num_canonical_nodes(shuffle_algo: str, num_physical_nodes: int) -> int:
    """The registered per-node default times the nodes (the reference's: 64 for py1s/py2s)."""
    return num_physical_nodes * get_shuffle(shuffle_algo).canonical_nodes_per_node


# ---- the built-in algorithms --------------------------------------------------------------------
def _shuffle_spans(row: CanonicalRow, out: np.ndarray, block_size: int,
                   rng: np.random.Generator) -> None:
    """py1s, py2s: spans in random order, each span's samples shuffled in place."""
    row = row.take(rng.permutation(row.num_spans))
    place_by_keys(out, row.read, row.length, row.length.astype(np.float64), rng, reflect=False,
                  id_bits=row.id_bits)


def _shuffle_windows(row: CanonicalRow, out: np.ndarray, block_size: int,
                     rng: np.random.Generator) -> None:
    """py1e: each span's samples spread over a window of about ``block_size``."""
    row = row.take(rng.permutation(row.num_spans))
    windows = rng.uniform(0.75 * block_size, 1.25 * block_size, row.num_spans)
    place_by_keys(out, row.read, row.length, np.maximum(windows, row.length), rng, reflect=True,
                  id_bits=row.id_bits)


def _block_lengths(total: int, block_size: int, rng: np.random.Generator,
                   randomized: bool) -> np.ndarray:
    """Consecutive block lengths covering ``total``: fixed, or random sizes after a stagger."""
    if not randomized:
        lengths = np.full(-(-total // block_size), block_size, np.int64)
    else:
        stagger = int(rng.integers(0, max(1, int(0.75 * block_size))))
        count = total // max(1, int(0.75 * block_size)) + 2
        sizes = rng.integers(int(0.75 * block_size), int(1.25 * block_size) + 1, count)
        lengths = np.concatenate([[stagger] if stagger else [], np.maximum(sizes, 1)])
        lengths = lengths.astype(np.int64)
    ends = np.minimum(np.cumsum(lengths), total)
    ends = ends[:np.searchsorted(ends, total) + 1]
    return np.diff(ends, prepend=0)


def _shuffle_in_blocks(row: CanonicalRow, out: np.ndarray, block_size: int,
                       rng: np.random.Generator, randomized: bool) -> None:
    """Spans in random order laid out, then samples shuffled within each block."""
    row.take(rng.permutation(row.num_spans)).write_to(out)
    blocks = _block_lengths(len(out), block_size, rng, randomized)
    block_starts = np.append(np.cumsum(blocks) - blocks, len(out))

    def read_blocks(first: int, last: int) -> np.ndarray:
        return out[block_starts[first]:block_starts[last]].copy()

    place_by_keys(out, read_blocks, blocks, blocks.astype(np.float64), rng, reflect=False,
                  id_bits=row.id_bits)


def _shuffle_fixed_blocks(row: CanonicalRow, out: np.ndarray, block_size: int,
                          rng: np.random.Generator) -> None:
    """py1b: blocks of exactly ``block_size``."""
    _shuffle_in_blocks(row, out, block_size, rng, randomized=False)


def _shuffle_random_blocks(row: CanonicalRow, out: np.ndarray, block_size: int,
                           rng: np.random.Generator) -> None:
    """py1br: a random first block, then blocks of [0.75, 1.25] x ``block_size``."""
    _shuffle_in_blocks(row, out, block_size, rng, randomized=True)


def _permute(ids: np.ndarray, rng: np.random.Generator) -> None:
    """naive: one uniform permutation of the whole epoch."""
    rng.shuffle(ids)


def _register_builtins() -> None:
    register_shuffle('py1s', _shuffle_spans, canonical_nodes_per_node=64)
    register_shuffle('py2s', _shuffle_spans, canonical_nodes_per_node=64,
                     shuffle_within_units=True)
    register_shuffle('py1b', _shuffle_fixed_blocks, uses_block_size=True)
    register_shuffle('py1br', _shuffle_random_blocks, uses_block_size=True)
    register_shuffle('py1e', _shuffle_windows, uses_block_size=True)
    register_shuffle('naive', shuffle_epoch=_permute)
    _builtin.update(_registry)


_register_builtins()
