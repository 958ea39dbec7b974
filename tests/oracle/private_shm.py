"""A private ``/dev/shm`` for the oracle tests' processes: no other job on the machine meets them.

The reference names its shared memory ``/dev/shm/<prefix>_<name>`` and walks every registry block
of the node when a dataset starts; a block another job left there (of any library, or a stale
one) can crash it, and ours can collide with theirs. So the reference's processes (and ours in
the cross tests) run in a mount namespace of their own, where ``/dev/shm`` is a fresh tmpfs.

One namespace serves the whole test process: a small holder process (``unshare --mount
--propagation private`` then ``mount -t tmpfs tmpfs /dev/shm``) keeps it alive, and each command
joins it with ``nsenter``, so processes meant to share shared memory (the ranks of one job, a
process of ours and one of the reference's walking each other's blocks) see the same
``/dev/shm``. Where a mount namespace cannot be made (not root, no ``unshare``, a container that
forbids it), commands run unchanged on the machine's ``/dev/shm``; ``STREAMING_PRIVATE_SHM=0``
asks for that too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from functools import lru_cache

__all__ = ['in_private_shm', 'private_shm_pid']

_HOLDER = ('mount -t tmpfs -o mode=1777 tmpfs /dev/shm && echo ready && '
           'read _ ; exit 0')  # lives until its stdin (a pipe from this process) closes


@lru_cache(maxsize=1)
def private_shm_pid() -> int | None:
    """The pid of the process holding this test process's private ``/dev/shm`` (started on
    first use, stopped at exit), or None where none can be made."""
    if os.environ.get('STREAMING_PRIVATE_SHM') == '0':
        return None
    if not (shutil.which('unshare') and shutil.which('nsenter')):
        return None
    try:
        holder = subprocess.Popen(['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
                                   _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    if holder.stdout.readline().strip() != 'ready':  # e.g. EPERM: not allowed here
        holder.wait()
        return None

    def stop() -> None:
        holder.stdin.close()
        try:
            holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            holder.kill()

    atexit.register(stop)
    return holder.pid


def in_private_shm(argv: list[str], cwd: str | None = None) -> list[str]:
    """``argv`` run inside the private ``/dev/shm`` (unchanged where there is none).

    ``cwd`` is the directory the command starts in (entering a mount namespace resets it);
    default: this process's.
    """
    pid = private_shm_pid()
    if pid is None:
        return list(argv)
    return ['nsenter', f'--target={pid}', '--mount', f'--wd={cwd or os.getcwd()}', '--', *argv]
