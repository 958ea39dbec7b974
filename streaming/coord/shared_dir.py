"""``SharedDir``: the directory of shared state one dataset instance keeps on each node.

Each dataset gets a directory under ``/dev/shm`` (or the temp dir; ``STREAMING_SHM_DIR``
overrides both) named by a token that only the processes of one job can share (see ``token``),
so two datasets in one process, two jobs on one machine, and pytest-xdist workers never meet.
It holds memory-mapped arrays, lock files and small files. Every process that uses it records
its pid and start time there. The node's first rank keeps it until every rank of the node has
joined; the last one to exit removes it; one whose processes are all gone (``kill -9``) is stale
and swept by the next dataset made on the machine, so a rerun needs no manual cleanup.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from streaming.coord.lock import FileLock
from streaming.fileio import atomic_write
from streaming.world import World

__all__ = ['SharedDir', 'base_dir', 'find_stale', 'sweep_stale']

logger = logging.getLogger(__name__)

_PREFIX = 'streaming-'
_OWNER = 'owner.json'
_MEMBERS = 'members'  # One record per process using the directory now.
_JOINED = 'joined'  # One file per process that ever joined (never removed).
_EXIT_WAIT_CAP = 60.0  # Longest a first rank waits at exit for the rest of its node.


def base_dir() -> str:
    """Where shared directories are made: ``STREAMING_SHM_DIR``, else /dev/shm, else tmp."""
    override = os.environ.get('STREAMING_SHM_DIR')
    if override:
        return override
    if os.path.isdir('/dev/shm') and os.access('/dev/shm', os.W_OK):
        return '/dev/shm'
    return tempfile.gettempdir()


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (distinguishes a reused pid), or None if not running.

    A process that has exited but is not reaped yet (a zombie: a killed DataLoader worker until
    its loader joins it) is not running.
    """
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:  # No /proc (macOS): fall back to a signal-0 probe.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return '?'
    if len(fields) < 20 or fields[0] in ('Z', 'X'):
        return None
    return fields[19]


def _write_pid_record(path: str) -> None:
    """Record this process (pid and start time) at ``path``, atomically."""
    atomic_write(path, json.dumps({'pid': os.getpid(), 'start': start_time(os.getpid())}))


def _alive(record_path: str) -> bool:
    """Whether the process recorded in a pid file (pid and start time) is still running."""
    try:
        with open(record_path) as f:
            owner = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, NotADirectoryError):
        return False
    started = start_time(owner['pid'])
    return started is not None and started in (owner['start'], '?')


def _owner_alive(path: str) -> bool:
    return _alive(os.path.join(path, _OWNER))


def _members_alive(path: str) -> bool:
    """Whether any process that joined the shared directory at ``path`` is still running."""
    members = os.path.join(path, _MEMBERS)
    try:
        names = os.listdir(members)
    except FileNotFoundError:
        return _owner_alive(path)
    return any(_alive(os.path.join(members, name)) for name in names)


def find_stale(base: str | None = None) -> list[str]:
    """Shared directories under ``base`` all of whose processes are gone (nothing is removed).

    Besides published directories this finds the staging directories (``.streaming-*``) of
    leaders that died before publishing theirs.
    """
    base = base or base_dir()
    found = []
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if name.startswith((_PREFIX, '.' + _PREFIX)) and os.path.isdir(path) and \
                os.path.exists(os.path.join(path, _OWNER)) and not _owner_alive(path) and \
                not _members_alive(path):
            found.append(path)
    return found


def sweep_stale(base: str | None = None) -> list[str]:
    """Remove shared directories all of whose processes are gone; returns what was removed."""
    removed = []
    for path in find_stale(base):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class SharedDir:
    """The shared-state directory of one dataset on one node: arrays, locks and files."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._arrays: dict[str, np.ndarray] = {}

    @classmethod
    def create_or_join(cls, token: str, world: World, arrays: dict[str, tuple[str, tuple]], *,
                       timeout: float) -> SharedDir:
        """The local leader creates the directory (with zeroed ``arrays``); the others join.

        A joiner waits up to ``timeout`` seconds for the leader to publish it, then raises
        TimeoutError naming the path.
        """
        base = base_dir()
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
            os.makedirs(os.path.join(staging, _JOINED))
            # A member from the start, so no sweep can take it for stale.
            _write_pid_record(os.path.join(staging, _MEMBERS, str(os.getpid())))
            os.rename(staging, path)  # Publish atomically: joiners see all of it or nothing.
        else:
            deadline = time.monotonic() + timeout
            while not _owner_alive(path):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f'Rank {world.rank} waited {timeout:.0f}s (coordination_timeout) for '
                        f'local rank 0 to create shared state at {path}. Do all ranks build the '
                        f'same datasets in the same order?')
                time.sleep(0.02)
        shared = cls(path)
        shared._join(world.local_world_size if world.is_local_leader else 0, timeout)
        return shared

    def _join(self, wait_for: int, timeout: float) -> None:
        """Record this process as a member; the last member to leave removes the directory.

        The creator passes ``wait_for``, the number of ranks on its node: at exit it keeps the
        directory until that many processes have joined (at most ``timeout`` seconds, and a
        minute). Without a process group nothing else holds a fast first rank back, and a rank
        that joins after the directory is gone would wait for it forever.
        """
        member = os.path.join(self.path, _MEMBERS, str(os.getpid()))
        _write_pid_record(member)
        with open(os.path.join(self.path, _JOINED, str(os.getpid())), 'w'):
            pass
        pid = os.getpid()

        def leave() -> None:
            if os.getpid() != pid:  # A forked child inherited this hook: not its directory.
                return
            if wait_for > 1:  # Bounded: a rank that never comes must not hold up the exit long.
                self._wait_for_joiners(wait_for, min(timeout, _EXIT_WAIT_CAP))
            try:
                os.remove(member)
            except FileNotFoundError:
                pass
            if not _members_alive(self.path):
                shutil.rmtree(self.path, ignore_errors=True)

        atexit.register(leave)

    def _wait_for_joiners(self, expected: int, timeout: float) -> None:
        joined = os.path.join(self.path, _JOINED)
        deadline = time.monotonic() + timeout
        while True:
            try:
                count = len(os.listdir(joined))
            except FileNotFoundError:
                return
            if count >= expected:
                return
            if time.monotonic() > deadline:
                logger.warning('%d of the %d ranks of this node joined the shared state at %s '
                               'within %.0fs; leaving without the others.', count, expected,
                               self.path, timeout)
                return
            time.sleep(0.05)

    def file_path(self, name: str) -> str:
        """The path of the shared file ``name``."""
        return os.path.join(self.path, name)

    def lock(self, name: str) -> FileLock:
        """The node-wide lock ``name``."""
        return FileLock(self.file_path(f'{name}.lock'))

    def array(self, name: str) -> np.ndarray:
        """A shared array created by the leader, memory-mapped once per process.

        A plain ndarray over the mapping, not the ``np.memmap`` itself: every index and
        comparison of a memmap runs Python-level hooks (``__getitem__``, ``__array_finalize__``),
        about twice the cost of the operation on these small arrays, which the read path and the
        node's downloads consult per sample and per shard.
        """
        array = self._arrays.get(name)
        if array is None:
            array = np.load(self.file_path(f'{name}.npy'), mmap_mode='r+').view(np.ndarray)
            self._arrays[name] = array
        return array

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_arrays': {}}  # Each process maps the files itself.

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
