"""The reference's ``streaming.base.distributed``: rank queries and collectives.

Ranks come from ``torch.distributed`` when a process group is initialized, else from the
launcher's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), as in
``streaming.world.World.detect``. Collectives are no-ops (or identities) in a single process.
The library itself never initializes a process group; ``maybe_init_dist`` does, when asked.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

from streaming.world import World

__all__ = ['all_gather', 'all_gather_object', 'barrier', 'broadcast', 'get_local_rank',
           'get_local_world_size', 'get_rank', 'get_world_size', 'maybe_init_dist']

TObj = TypeVar('TObj')


def _dist() -> Any:
    """``torch.distributed`` if a process group is initialized, else None."""
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def get_rank() -> int:
    """This process's rank among all ranks."""
    return World.detect().rank


def get_world_size() -> int:
    """The number of ranks."""
    return World.detect().world_size


def get_local_rank() -> int:
    """This process's rank within its node."""
    return World.detect().local_rank


def get_local_world_size() -> int:
    """The number of ranks per node."""
    return World.detect().local_world_size


def barrier() -> None:
    """Wait for every rank (nothing to wait for without a process group)."""
    dist = _dist()
    if dist is not None:
        dist.barrier()


def broadcast(tensor: Any, src: int) -> None:
    """Copy ``tensor`` from rank ``src`` to every rank, in place."""
    dist = _dist()
    if dist is not None:
        dist.broadcast(tensor, src)


def all_gather(tensor_list: list[Any], tensor: Any) -> None:
    """Fill ``tensor_list`` with every rank's ``tensor``."""
    dist = _dist()
    if dist is not None:
        dist.all_gather(tensor_list, tensor)
    else:
        tensor_list[0].copy_(tensor)


def all_gather_object(obj: TObj) -> list[TObj]:
    """Every rank's ``obj``, in rank order."""
    dist = _dist()
    if dist is None:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def maybe_init_dist() -> bool:
    """Initialize the default process group if needed; returns whether it did.

    It does when the launcher started several ranks and no group is initialized yet (NCCL
    with CUDA, else Gloo); the caller then owns it (``torch.distributed.destroy_process_group()``).
    """
    import torch
    import torch.distributed as dist
    if get_world_size() == 1 or not dist.is_available() or dist.is_initialized():
        return False
    backend = 'nccl' if torch.cuda.is_available() and dist.is_nccl_available() else 'gloo'
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    dist.init_process_group(backend=backend, rank=get_rank(), world_size=get_world_size())
    return True
