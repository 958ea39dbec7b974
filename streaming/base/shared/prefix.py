"""The reference's ``streaming.base.shared.prefix``: a per-dataset number for shared blocks.

With a check that no live dataset on the node streams into the same local directory.

``StreamingDataset`` does not use this (its state lives in ``streaming.coord`` shared directories,
which never collide); it is here for user code written against the reference.
"""

from __future__ import annotations

import os
import tempfile
import time

from streaming.base.constant import BARRIER_FILELOCK, CACHE_FILELOCK, LOCALS, SHM_TO_CLEAN, TICK
from streaming.base.shared.memory import SharedMemory, _attach
from streaming.base.world import World

__all__ = ['BARRIER_FILELOCK', 'CACHE_FILELOCK', 'LOCALS', 'SHM_TO_CLEAN', 'SharedMemory', 'TICK',
           'World', 'get_shm_prefix', 'pack_locals', 'unpack_locals']


def pack_locals(dirnames: list[str], prefix: int) -> bytes:
    """The registry block of a dataset streaming into ``dirnames``, as the reference lays it out.

    A little-endian 4-byte size that counts itself (``4 + len(text)``), then the UTF-8 text of
    the directories and the prefix number, each separated from the next by a NUL byte. A
    reference process on the same node reads every block this way (``text = block[4:size]``),
    so a size that left out its own 4 bytes would cut the prefix number off and crash it.
    """
    data = ('\0'.join(dirnames) + '\0' + str(prefix)).encode()
    return (4 + len(data)).to_bytes(4, 'little') + data


def unpack_locals(block: bytes) -> tuple[list[str], int | None]:
    """The local directories and prefix number a registry block records (see ``pack_locals``).

    A block whose size or text cannot be read (a foreign or torn block) yields no directories
    and prefix None: it keeps its prefix occupied but names no directory.
    """
    size = int.from_bytes(block[:4], 'little')
    if not 4 <= size <= len(block):
        return [], None
    *dirnames, number = block[4:size].decode(errors='replace').split('\0')
    return dirnames, int(number) if number.isdigit() else None


def _read_block(prefix: int) -> tuple[list[str], int | None] | None:
    """The registry block of ``prefix`` unpacked, or None if there is none."""
    try:
        shm = _attach(f'{prefix:06}_{LOCALS}')  # not registered: this process did not create it
    except FileNotFoundError:
        return None
    try:
        return unpack_locals(bytes(shm.buf))
    finally:
        shm.close()


def _in_use(prefix: int) -> bool:
    tmp = tempfile.gettempdir()
    if any(os.path.exists(os.path.join(tmp, f'{prefix:06}_{lock}'))
           for lock in (BARRIER_FILELOCK, CACHE_FILELOCK)):
        return True
    return any(os.path.exists(f'/dev/shm/{prefix:06}_{name}') for name in SHM_TO_CLEAN)


def _find_leaders_prefix(wanted: list[str], retry: int) -> tuple[int, SharedMemory]:
    for _ in range(max(retry, 1)):
        prefix = 0
        while True:  # up to the first free prefix, as the leader walks
            block = _read_block(prefix)
            if block == (wanted, prefix):
                return prefix, SharedMemory(f'{prefix:06}_{LOCALS}', False, auto_cleanup=False)
            if block is None and not _in_use(prefix):
                break
            prefix += 1
        time.sleep(TICK)
    raise RuntimeError(f'No shared-memory prefix registered for local directories {wanted}: '
                       f'the local leader has not called get_shm_prefix with the same ``local`` '
                       f'(waited {retry} ticks).')


def get_shm_prefix(streams_local: list[str], streams_remote: list[str | None], world: World,
                   retry: int = 100) -> tuple[int, SharedMemory]:
    """The first free prefix number, and the block recording this dataset's local dirs.

    The node's local leader registers the block; the other processes of the node find it (the
    block naming the same local dirs under its own prefix), waiting up to ``retry`` ticks for
    the leader. Raises ValueError if a live dataset already streams from a remote into one of
    ``streams_local`` (two datasets would overwrite each other's cache).
    """
    wanted = [os.path.abspath(p) for p in streams_local]
    reused = sorted({p for p in wanted if wanted.count(p) > 1})
    if reused:
        raise ValueError(f'Reused local directory: {reused} is given to more than one stream; '
                         f'give each stream its own.')
    if not world.is_local_leader:
        return _find_leaders_prefix(wanted, retry)
    for _ in range(retry):
        prefix = 0
        while True:
            block = _read_block(prefix)
            if block is not None:
                for local, remote in zip(wanted, streams_remote):
                    if remote is not None and local in block[0]:
                        raise ValueError(f'Reused local directory: {local} is already used by '
                                         f'a live dataset (prefix {prefix}).')
            if block is None and not _in_use(prefix):
                break
            prefix += 1
        data = pack_locals(wanted, prefix)
        try:
            shm = SharedMemory(f'{prefix:06}_{LOCALS}', True, len(data))
        except FileExistsError:
            time.sleep(TICK)
            continue
        shm.buf[:len(data)] = data
        return prefix, shm
    raise RuntimeError(f'No free shared-memory prefix found in {retry} attempts.')
