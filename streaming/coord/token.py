"""``make_job_token``: a name every rank of one job derives alike, and no other job does."""

from __future__ import annotations

import hashlib
import os
import sys
import uuid

from streaming.world import World

__all__ = ['make_job_token']

_instances_made = 0


def make_job_token(world: World, key: str) -> str:
    """A token that every rank of this job computes identically, and no other job does.

    With an initialized process group, rank 0 draws a random token and broadcasts it. Without
    one, a single process draws its own; ranks started by a launcher derive it from the
    launcher's rendezvous variables (which no two live jobs on a machine share), ``key`` (what
    the dataset reads) and how many datasets this process has made so far.
    """
    global _instances_made
    _instances_made += 1
    if world.world_size == 1:
        return uuid.uuid4().hex[:16]
    dist = sys.modules.get('torch.distributed')
    if dist is not None and dist.is_available() and dist.is_initialized():
        box = [uuid.uuid4().hex[:16] if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return str(box[0])
    parts = [os.environ.get(name, '') for name in
             ('MASTER_ADDR', 'MASTER_PORT', 'TORCHELASTIC_RUN_ID', 'WORLD_SIZE')]
    parts += [str(_instances_made), key]
    return hashlib.sha1('\0'.join(parts).encode()).hexdigest()[:16]
