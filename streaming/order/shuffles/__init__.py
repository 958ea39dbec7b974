"""The shuffles: one table of the reference's shape, read every time an order is made.

A shuffle is a function ``fn(shard_sizes, num_canonical_nodes, seed, epoch, block_size) ->
positions``, as in the reference: given the epoch's shuffle units (each whole-shard copy or
partial draw, laid end to end; see ``resample``), it returns which unit position is read at each
position of the epoch (a permutation of ``range(sum(shard_sizes))``). ``SHUFFLES`` is the one
table of them; ``streaming.base.shuffle.algos`` is the same dict object, so
``streaming.base.shuffle.algos['mine'] = fn`` and ``register_shuffle('mine', fn)`` do the same
thing, and the name is looked up whenever an epoch's order is made.

Built-ins, a module of this package each (``naive``, ``py1b``, ``py1br``, ``py1e``, ``py1s``,
``py2s``: the reference's permutations, over the rows of spans of ``rows``; ``index``: ours,
computable position by position) are ``BuiltinShuffle`` objects: the engine recognises them
and runs their incremental, memory-bounded form instead of calling them. A name mapped to
anything else is called as the reference calls it.

Two traits per name matter to the dataset (``ShuffleTraits``): whether ``shuffle_block_size`` is
read (the dataset then caps it to fit ``cache_limit``) and the default canonical nodes per
physical node (64 for ``py1s``/``py2s``, as in the reference; 1 otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from streaming.order.checks import check_int
from streaming.order.shuffles import index, naive, py1b, py1br, py1e, py1s, py2s
from streaming.order.shuffles.rows import FinalParts, id_dtype
from streaming.order.table import AlgorithmTable, Builtin

__all__ = ['BUILTIN_SHUFFLES', 'BuiltinShuffle', 'MIN_SHUFFLE_BLOCK_SIZE', 'SHUFFLES',
           'ShuffleEntry', 'ShuffleFn', 'ShuffleTraits',
           'default_num_canonical_nodes', 'default_shuffle_block_size', 'get_shuffle',
           'register_shuffle', 'shuffle_block_size_in_effect', 'shuffle_entry', 'shuffle_names',
           'shuffle_positions', 'shuffle_steps', 'shuffle_traits', 'unregister_shuffle']

# (shard_sizes, num_canonical_nodes, seed, epoch, block_size) -> positions.
ShuffleFn = Callable[[np.ndarray, int, int, int, int], np.ndarray]
# A built-in's work: the output array, then what of it is final, as it becomes final.
ShuffleSteps = Callable[..., Iterator[np.ndarray | FinalParts]]

# The reference's block size when none is given to a shuffle function, and the least default.
MIN_SHUFFLE_BLOCK_SIZE = 1 << 18
BUILTIN_SHUFFLES: dict[str, ShuffleSteps] = {
    'naive': naive.steps, 'py1b': py1b.steps, 'py1br': py1br.steps, 'py1e': py1e.steps,
    'py1s': py1s.steps, 'py2s': py2s.steps, index.NAME: index.steps}


class BuiltinShuffle(Builtin):
    """A built-in shuffle: callable with the reference's signature, run incrementally inside."""

    prefix = 'get_shuffle_'

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__doc__ = f'The ``{name}`` shuffle of an epoch (see ``streaming.order.shuffles``).'

    def __call__(self, shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
                 block_size: int = MIN_SHUFFLE_BLOCK_SIZE) -> np.ndarray:
        steps = self.steps(np.asarray(shard_sizes, np.int64), num_canonical_nodes, seed, epoch,
                           block_size)
        out = next(steps)
        for _ in steps:
            pass
        return np.asarray(out, np.int64)

    def steps(self, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int,
              block_size: int, first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
        return BUILTIN_SHUFFLES[self.name](np.asarray(unit_sizes, np.int64), num_canonical_nodes,
                                           seed, epoch, block_size, first_position)


@dataclass(frozen=True)
class ShuffleTraits:
    """What the dataset needs to know of a shuffle beyond its function."""

    uses_block_size: bool = False
    canonical_nodes_per_node: int = 1


# The shuffle table; ``streaming.base.shuffle.algos`` is this object.
SHUFFLES = AlgorithmTable('shuffle_algo', 'shuffle', map(BuiltinShuffle, BUILTIN_SHUFFLES))
SHUFFLES.traits.update({
    'py1s': ShuffleTraits(canonical_nodes_per_node=64),
    'py2s': ShuffleTraits(canonical_nodes_per_node=64),
    'py1b': ShuffleTraits(uses_block_size=True), 'py1br': ShuffleTraits(uses_block_size=True),
    'py1e': ShuffleTraits(uses_block_size=True), index.NAME: ShuffleTraits(uses_block_size=True),
})


def register_shuffle(name: str, fn: ShuffleFn, *, uses_block_size: bool = False,
                     canonical_nodes_per_node: int = 1) -> ShuffleFn:
    """Make ``shuffle_algo=name`` use ``fn`` (the reference's shuffle signature); returns it.

    The same as ``streaming.base.shuffle.algos[name] = fn``, plus the two traits. Register at
    import time of a module every process imports (DataLoader workers started by spawn import it
    again). Built-in names cannot be replaced here; a custom one can, by registering it again.
    """
    if not callable(fn):
        raise ValueError(f'register_shuffle({name!r}): fn must be callable as fn(shard_sizes, '
                         f'num_canonical_nodes, seed, epoch, block_size), got {fn!r}')
    check_int('canonical_nodes_per_node', canonical_nodes_per_node, 1)
    return SHUFFLES.add('register_shuffle', name, fn,
                        ShuffleTraits(bool(uses_block_size), canonical_nodes_per_node))


def unregister_shuffle(name: str) -> None:
    """Remove a custom shuffle (built-ins stay)."""
    SHUFFLES.remove('unregister_shuffle', name)


def shuffle_names() -> tuple[str, ...]:
    """The registered shuffle names, sorted."""
    return SHUFFLES.names()


def get_shuffle(name: str) -> ShuffleFn:
    """The shuffle registered as ``name``; ValueError naming ``shuffle_algo`` and the choices."""
    return SHUFFLES.lookup(name)


def shuffle_traits(name: str) -> ShuffleTraits:
    """The traits of shuffle ``name`` (the defaults for one only put in ``SHUFFLES``)."""
    get_shuffle(name)
    return SHUFFLES.traits.get(name, ShuffleTraits())


@dataclass(frozen=True)
class ShuffleEntry:
    """A shuffle as the dataset carries it to its DataLoader workers.

    Unpickled in a process that lacks the name (a worker started by spawn whose parent
    registered it in a script), it registers the function again.
    """

    name: str
    fn: ShuffleFn
    traits: ShuffleTraits

    def __reduce__(self) -> tuple:
        return _restore, (self.name, self.fn, self.traits)


def shuffle_entry(name: str) -> ShuffleEntry:
    """``name``'s function and traits, to carry to other processes."""
    return ShuffleEntry(name, get_shuffle(name), shuffle_traits(name))


def _restore(name: str, fn: ShuffleFn, traits: ShuffleTraits) -> ShuffleEntry:
    return ShuffleEntry(name, *SHUFFLES.restore(name, fn, traits))


def default_shuffle_block_size(num_canonical_nodes: int) -> int:
    """The reference's default: ``max(4_000_000 // num_canonical_nodes, 1 << 18)``."""
    return max(4_000_000 // num_canonical_nodes, MIN_SHUFFLE_BLOCK_SIZE)


def shuffle_block_size_in_effect(shuffle_block_size: int | None, num_canonical_nodes: int) -> int:
    """The block size a shuffle uses: the one given, else the default.

    The one place the default is applied: ``get_epoch_order`` and ``DatasetConfig.block_size``
    both ask here.
    """
    return shuffle_block_size or default_shuffle_block_size(num_canonical_nodes)


def default_num_canonical_nodes(shuffle_algo: str, num_physical_nodes: int) -> int:
    """The registered per-node default times the nodes (the reference's: 64 for py1s/py2s)."""
    return num_physical_nodes * shuffle_traits(shuffle_algo).canonical_nodes_per_node


# ---- the engine's one way to run a shuffle -------------------------------------------------------
def shuffle_steps(name: str, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int,
                  epoch: int, block_size: int,
                  first_position: int = 0) -> Iterator[np.ndarray | FinalParts]:
    """Run shuffle ``name`` over the units.

    Yields the position array, then how many of its first positions are final, as they become
    final (the last yield is all of them); a built-in shuffle that starts at
    ``first_position`` yields ``rows.FinalParts`` tuples meanwhile.
    """
    fn = get_shuffle(name)
    if isinstance(fn, BuiltinShuffle):
        yield from fn.steps(unit_sizes, num_canonical_nodes, seed, epoch, block_size,
                            first_position)
        return
    sizes = np.asarray(unit_sizes, np.int64)
    total = int(sizes.sum())
    got = np.asarray(fn(sizes, num_canonical_nodes, seed, epoch, block_size))
    if got.shape != (total,) or (total and not np.issubdtype(got.dtype, np.integer)):
        raise ValueError(f'shuffle_algo={name!r} returned {got.dtype} of shape {got.shape}; a '
                         f'shuffle must return one integer position per sample ({total})')
    if total and (int(got.min()) < 0 or int(got.max()) >= total):
        raise ValueError(f'shuffle_algo={name!r} returned positions outside [0, {total})')
    dtype = id_dtype(total)
    yield got.astype(dtype, copy=False)
    yield total


def shuffle_positions(name: str, unit_sizes: np.ndarray, num_canonical_nodes: int, seed: int,
                      epoch: int, block_size: int) -> np.ndarray:
    """The unit position read at each position of the epoch, by shuffle ``name``."""
    steps = shuffle_steps(name, unit_sizes, num_canonical_nodes, seed, epoch, block_size)
    out = next(steps)
    for _ in steps:
        pass
    return out  # type: ignore[return-value]
