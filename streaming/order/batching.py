"""The batching-method table: how an epoch's ids are laid out into every worker's batches.

``BATCHING`` maps a name to ``fn(dataset, world, epoch, sample_in_epoch) -> ids`` of shape
``(nodes, ranks, workers, batches, batch_size)`` (-1: none), as the reference's
``generate_work`` functions; ``streaming.base.batching.batching_methods`` is this dict object, so
a method put there is used by ``StreamingDataset(batching_method=name)``. The four built-ins are
``BuiltinBatching`` entries: ``plan`` runs them itself (and, for ``random``, a worker computes
only its own slots). A registered method is called with the reference's ``World``
(``streaming.base.world.World``, installed by that module through ``set_world_adapter``: this
layer cannot import it).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from streaming.order.checks import check_choice
from streaming.order.exact_batching import BATCHING_METHODS

__all__ = ['BATCHING', 'BuiltinBatching', 'BatchingFn', 'batching_fn', 'reference_world',
           'set_world_adapter']

BatchingFn = Callable[[Any, Any, int, int], np.ndarray]


class BuiltinBatching:
    """A built-in method: callable with the reference's signature (the dataset's own order).

    ``dataset`` is a ``StreamingDataset`` (not imported here: it imports this module).
    """

    def __init__(self, method: str) -> None:
        self.method = method
        self.__name__ = self.__qualname__ = f'generate_work_{method}_batching'
        self.__doc__ = (f"The epoch's ``(nodes, ranks, workers, batches, batch_size)`` sample ids "
                        f'with ``batching_method={method!r}`` (-1: none).')

    def __call__(self, dataset: Any, world: Any, epoch: int,
                 sample_in_epoch: int) -> np.ndarray:
        ours = world.to_world() if hasattr(world, 'to_world') else world
        return dataset._epoch_order(epoch, sample_in_epoch, ours, batching_method=self.method,
                                    builtin=True)

    def __reduce__(self) -> tuple:
        return BuiltinBatching, (self.method,)


BATCHING: dict[str, BatchingFn] = {name: BuiltinBatching(name) for name in BATCHING_METHODS}
_adapter: list[Callable[[Any], Any]] = []
_lock = threading.Lock()


def set_world_adapter(adapter: Callable[[Any], Any]) -> None:
    """How a registered method receives the world (the reference's ``World.from_world``)."""
    with _lock:
        _adapter[:] = [adapter]


def batching_fn(method: str) -> BatchingFn:
    """The method registered as ``method``; ValueError naming ``batching_method`` otherwise."""
    fn = BATCHING.get(method)
    if fn is None:
        check_choice('batching_method', method, tuple(BATCHING))
    return fn  # type: ignore[return-value]


def reference_world(world: Any) -> Any:
    """``world`` (a ``streaming.World``) as a registered method expects it."""
    if not _adapter:
        raise ValueError('a registered batching method needs streaming.base.batching imported '
                         '(register it through streaming.base.batching.batching_methods)')
    return _adapter[0](world)
