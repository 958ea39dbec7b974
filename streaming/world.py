"""Who this process is: rank, node, and DataLoader worker.

Ranks come from ``torch.distributed`` when a process group is initialized, else from the
``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` variables that launchers set, or from
an explicit ``World`` for launchers that set neither. This module never initializes a process
group: that is the user's choice (the reference does it on their behalf, on GPU 0 of every rank).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

__all__ = ['World']


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value in (None, ''):
        return default
    try:
        return int(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f'Environment variable {name}={value!r} must be an integer.') from None


@dataclass(frozen=True)
class World:
    """The position of one process among ranks, nodes and DataLoader workers."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f'World: rank {self.rank} must lie in [0, world_size='
                             f'{self.world_size}).')
        if self.local_world_size < 1 or self.world_size % self.local_world_size:
            raise ValueError(f'World: local_world_size {self.local_world_size} must divide '
                             f'world_size {self.world_size} (nodes hold equal numbers of ranks).')
        if not 0 <= self.local_rank < self.local_world_size or \
                self.rank % self.local_world_size != self.local_rank:
            raise ValueError(f'World: local_rank {self.local_rank} does not match rank '
                             f'{self.rank} with {self.local_world_size} ranks per node.')
        if self.num_workers < 1 or not 0 <= self.worker < self.num_workers:
            raise ValueError(f'World: worker {self.worker} must lie in [0, num_workers='
                             f'{self.num_workers}).')

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    @property
    def node(self) -> int:
        return self.rank // self.local_world_size

    @property
    def is_local_leader(self) -> bool:
        """The first rank of its node (whatever the worker)."""
        return self.local_rank == 0

    @classmethod
    def detect(cls) -> World:
        """The ranks of this process, from torch.distributed or the launcher's variables."""
        rank, world_size = _env_int('RANK', 0), _env_int('WORLD_SIZE', 1)
        dist = sys.modules.get('torch.distributed')
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        # Without LOCAL_WORLD_SIZE each rank counts as a node of its own: ranks then share no
        # cache state, which can cost downloads but can never wait on a leader elsewhere.
        local_world_size = _env_int('LOCAL_WORLD_SIZE', 1)
        local_rank = _env_int('LOCAL_RANK', rank % local_world_size)
        return cls(rank, world_size, local_rank, local_world_size)

    def with_worker(self) -> World:
        """This world with the calling DataLoader worker filled in (worker 0 of 1 outside)."""
        from torch.utils.data import get_worker_info
        info = get_worker_info()
        if info is None:
            return replace(self, worker=0, num_workers=1)
        return replace(self, worker=info.id, num_workers=info.num_workers)
