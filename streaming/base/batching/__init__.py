"""The reference's ``streaming.base.batching``: each worker's sample ids, by batching method.

Each function is ``StreamingDataset``'s own epoch order (``streaming.order``)
with that batching method.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Callable

import numpy as np
from numpy.typing import NDArray

from streaming.base.world import World

if TYPE_CHECKING:
    from streaming.dataset.dataset import StreamingDataset

__all__ = ['batching_methods', 'generate_work', 'generate_work_device_per_stream_batching',
           'generate_work_per_stream_batching', 'generate_work_random_batching',
           'generate_work_stratified_batching']


def _work(method: str, dataset: StreamingDataset, world: World, epoch: int,
          sample_in_epoch: int) -> NDArray[np.int64]:
    if dataset.batching_method != method:
        dataset = copy.copy(dataset)
        dataset.config = dataclasses.replace(dataset.config, batching_method=method)
    return dataset._epoch_order(epoch, sample_in_epoch, world.to_world())


def _method(method: str) -> Callable[..., NDArray[np.int64]]:
    def generate(dataset: StreamingDataset, world: World, epoch: int,
                 sample_in_epoch: int) -> NDArray[np.int64]:
        return _work(method, dataset, world, epoch, sample_in_epoch)
    generate.__name__ = generate.__qualname__ = f'generate_work_{method}_batching'
    generate.__doc__ = (f'The epoch\'s ``(nodes, ranks, workers, batches, batch_size)`` sample '
                        f'ids with ``batching_method={method!r}`` (-1: none).')
    return generate


generate_work_random_batching = _method('random')
generate_work_stratified_batching = _method('stratified')
generate_work_per_stream_batching = _method('per_stream')
generate_work_device_per_stream_batching = _method('device_per_stream')

batching_methods: dict[str, Callable[..., NDArray[np.int64]]] = {
    'random': generate_work_random_batching,
    'stratified': generate_work_stratified_batching,
    'per_stream': generate_work_per_stream_batching,
    'device_per_stream': generate_work_device_per_stream_batching,
}


def generate_work(batching_method: str, dataset: StreamingDataset, world: World, epoch: int,
                  sample_in_epoch: int) -> NDArray[np.int64]:
    """The epoch's sample ids for every worker, with the named batching method."""
    if batching_method not in batching_methods:
        raise ValueError(f'Unknown batching method {batching_method!r}; expected one of '
                         f'{list(batching_methods)}.')
    return batching_methods[batching_method](dataset, world, epoch, sample_in_epoch)
