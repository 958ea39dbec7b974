"""The reference's ``streaming.base.world``: ``World``, one worker's position.

Among nodes, ranks and dataloader workers, with the reference's constructor and attributes.

``World.detect()`` reads the ranks as ``streaming.world.World.detect`` does (torch.distributed
or the launcher's variables) and the dataloader worker from torch.
"""

from __future__ import annotations

from typing import Any

from streaming.world import World as _OurWorld

__all__ = ['World']


class World:
    """``worker`` is the global worker id: ``rank * workers_per_rank + worker_of_rank``."""

    def __init__(self, num_nodes: int, ranks_per_node: int, workers_per_rank: int,
                 worker: int) -> None:
        for name, value in (('num_nodes', num_nodes), ('ranks_per_node', ranks_per_node),
                            ('workers_per_rank', workers_per_rank)):
            if value < 1:
                raise ValueError(f'World: {name} must be >= 1, got {value}.')
        self.num_nodes = num_nodes
        self.ranks_per_node = ranks_per_node
        self.workers_per_rank = workers_per_rank
        self.num_ranks = num_nodes * ranks_per_node
        self.workers_per_node = ranks_per_node * workers_per_rank
        self.num_workers = num_nodes * self.workers_per_node
        if not 0 <= worker < self.num_workers:
            raise ValueError(f'World: worker {worker} must lie in [0, {self.num_workers}).')
        self.worker = worker
        self.rank, self.worker_of_rank = divmod(worker, workers_per_rank)
        self.node, self.worker_of_node = divmod(worker, self.workers_per_node)
        self.rank_of_node = self.rank % ranks_per_node
        self.is_multinode = num_nodes > 1
        self.is_leader = not worker
        self.is_local_leader = not self.worker_of_node

    @classmethod
    def from_world(cls, world: _OurWorld) -> World:
        """The same position, from this library's ``streaming.world.World``."""
        return cls(world.num_nodes, world.local_world_size, world.num_workers,
                   world.rank * world.num_workers + world.worker)

    def to_world(self) -> _OurWorld:
        """This position as this library's ``streaming.world.World``."""
        return _OurWorld(self.rank, self.num_ranks, self.rank_of_node, self.ranks_per_node,
                         self.worker_of_rank, self.workers_per_rank)

    @classmethod
    def detect(cls) -> World:
        """This process's position (in a dataloader worker: that worker's)."""
        return cls.from_world(_OurWorld.detect().with_worker())

    def detect_workers(self) -> World:
        """This world with the calling dataloader worker filled in."""
        world = self.to_world().with_worker()
        return World(self.num_nodes, self.ranks_per_node, world.num_workers,
                     self.rank * world.num_workers + world.worker)

    def copy(self) -> World:
        """An identical, independent world."""
        return World(self.num_nodes, self.ranks_per_node, self.workers_per_rank, self.worker)

    def replicate(self, replication: int) -> World:
        """The world seen by iteration with ``replication``.

        Each group of ``replication`` consecutive ranks shares the same samples.
        """
        if replication < 1 or self.num_ranks % replication:
            raise ValueError(f'replication={replication} must divide the number of ranks '
                             f'({self.num_ranks}).')
        ranks = self.num_ranks // replication
        if ranks % self.ranks_per_node:
            num_nodes, ranks_per_node = 1, ranks
        else:
            num_nodes, ranks_per_node = ranks // self.ranks_per_node, self.ranks_per_node
        rank = self.rank // replication
        return World(num_nodes, ranks_per_node, self.workers_per_rank,
                     rank * self.workers_per_rank + self.worker_of_rank)

    def to_json(self) -> dict[str, Any]:
        """Every attribute, as a dict."""
        keys = ['node', 'num_nodes', 'is_multinode', 'rank', 'num_ranks', 'rank_of_node',
                'ranks_per_node', 'worker', 'num_workers', 'worker_of_node', 'workers_per_node',
                'worker_of_rank', 'workers_per_rank', 'is_leader', 'is_local_leader']
        return {key: getattr(self, key) for key in keys}

    def __repr__(self) -> str:
        return (f'World(num_nodes={self.num_nodes}, ranks_per_node={self.ranks_per_node}, '
                f'workers_per_rank={self.workers_per_rank}, worker={self.worker})')
