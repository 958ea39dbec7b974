"""A real process for coord tests: ``python -m tests.coord.child ROLE ARGS...``.

Roles (each prints one line when it has done its part, then waits for stdin to close or for
the test to kill it):

* ``create TOKEN RANK LOCAL_WORLD_SIZE``: create or join the shared directory as that rank
  (``counter`` array of 4 int64); a joiner adds 1 to ``counter[RANK]``. Prints the path.
* ``lock PATH``: hold a FileLock on PATH. Prints ``locked``.
* ``token RANK WORLD_SIZE KEY``: print ``make_job_token`` for that rank, joining a gloo group
  when ``STREAMING_TEST_RENDEZVOUS`` names a file.
"""

from __future__ import annotations

import os
import sys

from streaming.coord import FileLock, SharedDir, make_job_token
from streaming.world import World


def main() -> None:
    role, args = sys.argv[1], sys.argv[2:]
    if role == 'create':
        token, rank, local = args[0], int(args[1]), int(args[2])
        world = World(rank=rank, world_size=local, local_rank=rank, local_world_size=local)
        shared = SharedDir.create_or_join(token, world, {'counter': ('int64', (4,))},
                                          timeout=float(os.environ.get('CHILD_TIMEOUT', '30')))
        if rank:
            shared.array('counter')[rank] += 1
        print(shared.path, flush=True)
    elif role == 'lock':
        FileLock(args[0]).acquire()
        print('locked', flush=True)
    elif role == 'token':
        rank, world_size, key = int(args[0]), int(args[1]), args[2]
        rendezvous = os.environ.get('STREAMING_TEST_RENDEZVOUS')
        if rendezvous:
            import torch.distributed as dist
            dist.init_process_group('gloo', init_method=f'file://{rendezvous}', rank=rank,
                                    world_size=world_size)
        world = World(rank=rank, world_size=world_size, local_rank=0, local_world_size=1)
        print(make_job_token(world, key), flush=True)
        if rendezvous:
            dist.barrier()
            dist.destroy_process_group()
        return
    sys.stdin.read()  # Stay alive (and a member) until the test closes our stdin.


if __name__ == '__main__':
    main()
