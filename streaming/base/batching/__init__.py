"""The reference's ``streaming.base.batching``: each worker's sample ids, by batching method.

``batching_methods`` is the dataset's batching table itself (``streaming.order.batching``):
``batching_methods['mine'] = fn``, with the reference's signature ``fn(dataset, world, epoch,
sample_in_epoch) -> ids`` (``world`` a ``streaming.base.world.World``), makes
``StreamingDataset(batching_method='mine')`` use ``fn``, as in the reference. The built-ins are
the dataset's own order (``streaming.order``) with that method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from streaming.base.world import World
from streaming.order import BATCHING, set_world_adapter

if TYPE_CHECKING:
    from streaming.dataset.dataset import StreamingDataset

__all__ = ['batching_methods', 'generate_work', 'generate_work_device_per_stream_batching',
           'generate_work_per_stream_batching', 'generate_work_random_batching',
           'generate_work_stratified_batching']

set_world_adapter(World.from_world)
batching_methods = BATCHING
generate_work_random_batching = BATCHING['random']
generate_work_stratified_batching = BATCHING['stratified']
generate_work_per_stream_batching = BATCHING['per_stream']
generate_work_device_per_stream_batching = BATCHING['device_per_stream']


def generate_work(batching_method: str, dataset: StreamingDataset, world: World, epoch: int,
                  sample_in_epoch: int) -> NDArray[np.int64]:
    """The epoch's sample ids for every worker, with the named batching method."""
    if batching_method not in batching_methods:
        raise ValueError(f'Unknown batching method {batching_method!r}; expected one of '
                         f'{list(batching_methods)}.')
    return batching_methods[batching_method](dataset, world, epoch, sample_in_epoch)
