"""A namespace: one directory of shared state per dataset instance per node.

Each dataset gets a directory under ``/dev/shm`` (or the temp dir) named by a token that only the
processes of one job can share, so two datasets in one process, two jobs on one machine, and
pytest-xdist workers never meet. Every rank process that uses it records its pid and start time
there; the last one to exit removes the directory, and one whose processes are all gone
(``kill -9``) is stale and swept by the next dataset made on the machine, so a rerun needs no
manual cleanup.

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
_MEMBERS = 'members'
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


def _alive(record_path: str) -> bool:
    """Whether the process recorded in a pid file (pid and start time) is still running."""
    try:
        with open(record_path) as f:
            owner = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, NotADirectoryError):
        return False
    started = _start_time(owner['pid'])
    return started is not None and started in (owner['start'], '?')


def _owner_alive(path: str) -> bool:
    return _alive(os.path.join(path, _OWNER))


def _members_alive(path: str) -> bool:
    """Whether any process that joined the namespace at ``path`` is still running."""
    members = os.path.join(path, _MEMBERS)
    try:
        names = os.listdir(members)
    except FileNotFoundError:
        return _owner_alive(path)
    return any(_alive(os.path.join(members, name)) for name in names)


def _write_pid_record(path: str) -> None:
    with open(path, 'w') as f:
        json.dump({'pid': os.getpid(), 'start': _start_time(os.getpid())}, f)


def sweep_stale(base: str | None = None) -> list[str]:
    """Remove namespaces all of whose processes are gone; returns what was removed."""
    base = base or _base_dir()
    removed = []
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if name.startswith(_PREFIX) and os.path.isdir(path) and \
                os.path.exists(os.path.join(path, _OWNER)) and not _owner_alive(path) and \
                not _members_alive(path):
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

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, return False at once if someone holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self._fds[_thread_id()] = fd
        return True

    def release(self) -> None:
        fd = self._fds.pop(_thread_id())
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

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
            _write_pid_record(os.path.join(staging, _OWNER))
            os.makedirs(os.path.join(staging, _MEMBERS))
            # A member from the start, so no sweep can take it for stale.
            _write_pid_record(os.path.join(staging, _MEMBERS, str(os.getpid())))
            os.rename(staging, path)  # Publish atomically: joiners see all of it or nothing.
        else:
            deadline = time.monotonic() + timeout
            while not _owner_alive(path):
                if time.monotonic() > deadline:
                    raise TimeoutError(f'Rank {world.rank} waited {timeout:.0f}s for local rank 0 '
                                       f'to create shared state at {path}. Do all ranks build '
                                       f'the same datasets in the same order?')
                time.sleep(0.02)
        namespace = cls(path)
        namespace._join()
        return namespace

    def _join(self) -> None:
        """Record this process as a member; the last member to leave removes the directory."""
        member = os.path.join(self.path, _MEMBERS, str(os.getpid()))
        _write_pid_record(member)
        pid = os.getpid()

        def leave() -> None:
            if os.getpid() != pid:  # A forked child inherited this hook: not its namespace.
                return
            try:
                os.remove(member)
            except FileNotFoundError:
                pass
            if not _members_alive(self.path):
                shutil.rmtree(self.path, ignore_errors=True)

        atexit.register(leave)

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
