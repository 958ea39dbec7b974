"""The reference's ``streaming.base.shared.prefix``: a per-dataset number for shared blocks.

With a check that no live dataset on the node streams into the same local directory.

``StreamingDataset`` does not use this (its state lives in ``streaming.coord`` shared directories,
which never collide); it is here for user code written against the reference.
"""

from __future__ import annotations

import os
import tempfile
import time
from multiprocessing.shared_memory import SharedMemory as _BuiltinSharedMemory

from streaming.base.constant import BARRIER_FILELOCK, CACHE_FILELOCK, LOCALS, SHM_TO_CLEAN, TICK
from streaming.base.shared.memory import SharedMemory
from streaming.base.world import World

__all__ = ['BARRIER_FILELOCK', 'CACHE_FILELOCK', 'LOCALS', 'SHM_TO_CLEAN', 'SharedMemory', 'TICK',
           'World', 'get_shm_prefix']


def _read_locals(prefix: int) -> list[str] | None:
    try:
        shm = _BuiltinSharedMemory(f'{prefix:06}_{LOCALS}', False)
    except FileNotFoundError:
        return None
    try:
        size = int.from_bytes(bytes(shm.buf[:4]), 'little')
        return bytes(shm.buf[4:4 + size]).decode().split('\0')[:-1]
    finally:
        shm.close()


def _in_use(prefix: int) -> bool:
    tmp = tempfile.gettempdir()
    if any(os.path.exists(os.path.join(tmp, f'{prefix:06}_{lock}'))
           for lock in (BARRIER_FILELOCK, CACHE_FILELOCK)):
        return True
    return any(os.path.exists(f'/dev/shm/{prefix:06}_{name}') for name in SHM_TO_CLEAN)


def get_shm_prefix(streams_local: list[str], streams_remote: list[str | None], world: World,
                   retry: int = 100) -> tuple[int, SharedMemory]:
    """The first free prefix number, and the block recording this dataset's local dirs.

    Raises ValueError if a live dataset already streams from a remote into one of
    ``streams_local`` (two datasets would overwrite each other's cache).
    """
    del world  # Each process registers on its own: no leader election is needed here.
    wanted = [os.path.abspath(p) for p in streams_local]
    for _ in range(retry):
        prefix = 0
        while True:
            others = _read_locals(prefix)
            if others is not None:
                for local, remote in zip(wanted, streams_remote):
                    if remote is not None and local in others:
                        raise ValueError(f'Reused local directory: {local} is already used by '
                                         f'a live dataset (prefix {prefix}).')
            if others is None and not _in_use(prefix):
                break
            prefix += 1
        data = ''.join(f'{p}\0' for p in wanted).encode() + str(prefix).encode()
        try:
            shm = SharedMemory(f'{prefix:06}_{LOCALS}', True, 4 + len(data))
        except FileExistsError:
            time.sleep(TICK)
            continue
        shm.buf[:4] = len(data).to_bytes(4, 'little')
        shm.buf[4:4 + len(data)] = data
        return prefix, shm
    raise RuntimeError(f'No free shared-memory prefix found in {retry} attempts.')
