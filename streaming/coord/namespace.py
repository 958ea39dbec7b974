"""A namespace: one directory of shared state per dataset instance per node.

Each dataset gets a directory under ``/dev/shm`` (or the temp dir) named by a token that only the
processes of one job can share, so two datasets in one process, two jobs on one machine, and
pytest-xdist workers never meet. The directory records its creator's pid and start time; one
whose creator is gone (``kill -9``) is stale and swept, so a rerun needs no manual cleanup.

Locks are ``flock`` locks: waiting blocks in the kernel instead of polling, and a lock held by a
killed process is released by the kernel.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from streaming.world import World

__all__ = ['FileLock', 'Namespace', 'make_job_token']

_PREFIX = 'streaming-'
_OWNER = 'owner.json'
_instances_made = 0


def _base_dir() -> str:
    override = os.environ.get('STREAMING_SHM_DIR')
    if override:
        return override
    if os.path.isdir('/dev/shm') and os.access('/dev/shm', os.W_OK):
        return '/dev/shm'
    return tempfile.gettempdir()


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (distinguishes a reused pid), or None if not running."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[19]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    except OSError:  # No /proc (macOS): fall back to a signal-0 probe.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return '?'


def _owner_alive(path: str) -> bool:
    try:
        with open(os.path.join(path, _OWNER)) as f:
            owner = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, NotADirectoryError):
        return False
    started = _start_time(owner['pid'])
    return started is not None and started in (owner['start'], '?')


def sweep_stale(base: str | None = None) -> list[str]:
    """Remove namespaces whose creating process is gone; returns what was removed."""
    base = base or _base_dir()
    removed = []
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if name.startswith(_PREFIX) and os.path.isdir(path) and \
                os.path.exists(os.path.join(path, _OWNER)) and not _owner_alive(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def make_job_token(world: World, key: str) -> str:
    """A token that every rank of this job computes identically, and no other job does.

    With an initialized process group, rank 0 draws a random token and broadcasts it. Without
    one, a single process draws its own; ranks started by a launcher derive it from the
    launcher's rendezvous variables, which no two live jobs on a machine share.
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


class FileLock:
    """An exclusive ``flock`` on a file; a context manager, safe across threads and processes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fds: dict[int, int] = {}

    def __enter__(self) -> FileLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fds[_thread_id()] = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        fd = self._fds.pop(_thread_id())
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_fds': {}}


def _thread_id() -> int:
    import threading
    return threading.get_ident()


class Namespace:
    """The shared-state directory of one dataset on one node."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._arrays: dict[str, np.ndarray] = {}

    @classmethod
    def create_or_join(cls, token: str, world: World, arrays: dict[str, tuple[str, tuple]],
                       timeout: float = 120.0) -> Namespace:
        """The local leader creates the directory (with zeroed ``arrays``); the others wait."""
        base = _base_dir()
        path = os.path.join(base, f'{_PREFIX}{token}-node{world.node}')
        if world.is_local_leader:
            sweep_stale(base)
            if os.path.exists(path):
                if _owner_alive(path):
                    raise RuntimeError(f'Shared state {path} already belongs to a live process; '
                                       f'two jobs derived the same token.')
                shutil.rmtree(path, ignore_errors=True)
            staging = os.path.join(base, f'.{_PREFIX}{uuid.uuid4().hex}')
            os.makedirs(staging)
            for name, (dtype, shape) in arrays.items():
                np.lib.format.open_memmap(os.path.join(staging, f'{name}.npy'), 'w+',
                                          np.dtype(dtype), shape).flush()
            with open(os.path.join(staging, _OWNER), 'w') as f:
                json.dump({'pid': os.getpid(), 'start': _start_time(os.getpid())}, f)
            os.rename(staging, path)  # Publish atomically: joiners see all of it or nothing.
            creator = os.getpid()
            atexit.register(lambda: os.getpid() == creator and
                            shutil.rmtree(path, ignore_errors=True))
        else:
            deadline = time.monotonic() + timeout
            while not _owner_alive(path):
                if time.monotonic() > deadline:
                    raise TimeoutError(f'Rank {world.rank} waited {timeout:.0f}s for local rank 0 '
                                       f'to create shared state at {path}. Do all ranks build '
                                       f'the same datasets in the same order?')
                time.sleep(0.02)
        return cls(path)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def lock(self, name: str) -> FileLock:
        return FileLock(self.file(f'{name}.lock'))

    def array(self, name: str) -> np.ndarray:
        """A shared array created by the leader, memory-mapped once per process."""
        array = self._arrays.get(name)
        if array is None:
            array = np.load(self.file(f'{name}.npy'), mmap_mode='r+')
            self._arrays[name] = array
        return array

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_arrays': {}}  # Each process maps the files itself.

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
