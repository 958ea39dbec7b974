"""The node's kernel locks: ``FileLock``, ``Lease``, and the ``flock`` primitives under them.

Waiting blocks in the kernel instead of polling, and a lock held by a killed process is released
by the kernel, so a crash never leaves a lock behind. ``try_lock`` and ``is_locked`` are the
primitives for code that holds a lock on a file it has open anyway (a partial download) or only
asks whether someone does (``streaming clean``).
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from typing import Any

__all__ = ['FileLock', 'Lease', 'is_locked', 'same_file', 'try_lock']

# Locks holding a descriptor now. A forked child closes its copies of those descriptors (without
# unlocking, which would unlock the parent too): otherwise a child would keep its parent's locks
# held after the parent died, and a process waiting for one would wait for the child instead.
_holding: weakref.WeakSet = weakref.WeakSet()


def try_lock(fd: int, blocking: bool = False) -> bool:
    """Lock the open descriptor ``fd`` exclusively; False at once if held and not ``blocking``.

    Closing the descriptor (or the process ending) releases the lock.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    """Release the lock on ``fd`` (the descriptor stays open)."""
    fcntl.flock(fd, fcntl.LOCK_UN)


def is_locked(path: str) -> bool:
    """Whether some process holds ``path`` locked now (True too if it cannot be opened)."""
    return _held(path, missing=True)


def _held(path: str, missing: bool) -> bool:
    """Whether some descriptor holds ``path`` locked now; ``missing`` if there is no such file."""
    try:
        fd = _open_existing(path)
    except OSError:
        return True
    if fd is None:
        return missing
    try:
        if not try_lock(fd):
            return True
        unlock(fd)  # Before closing: see ``_let_go``.
        return False
    finally:
        os.close(fd)


def _let_go(fd: int) -> None:
    """Unlock, then close, a descriptor this process locked.

    Closing alone releases a flock only when no other process holds a copy of the descriptor:
    a child forked by another thread meanwhile would keep the lock for as long as it lives
    (and a node's processes waiting on it, for ever). Unlocking releases it for every copy.
    """
    try:
        unlock(fd)
    finally:
        os.close(fd)


def _open_existing(path: str) -> int | None:
    """A read-only descriptor of the file at ``path``, never creating it (None: no file)."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, 'O_CLOEXEC', 0))
    except FileNotFoundError:
        return None


def _open_lock_file(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, 'O_CLOEXEC', 0), 0o600)


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two ``stat`` results are of one file (device and inode)."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _is_file_at(fd: int, path: str) -> bool:
    """Whether the open descriptor ``fd`` is the file now at ``path`` (not removed, replaced)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    return same_file(os.fstat(fd), at_path)


class FileLock:
    """An exclusive ``flock`` on ``path``; a context manager, safe across threads and processes.

    Each thread takes the lock through a descriptor of its own, so two threads of one process
    exclude each other as two processes do.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fds: dict[int, int] = {}

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, return False at once if someone holds it.

        A holder may remove the lock file before it lets go (``order_store`` does, so the
        node's shared directory does not grow). Whoever opened that file meanwhile and then
        gets its lock holds a lock nobody else can see (a new file takes the name): so the
        lock counts only if the locked file is still the one at ``path``; else try again.
        """
        while True:
            fd = _open_lock_file(self.path)
            if not try_lock(fd, blocking):
                os.close(fd)
                return False
            if _is_file_at(fd, self.path):
                break
            _let_go(fd)
        self._fds[threading.get_ident()] = fd
        _holding.add(self)
        return True

    def held(self) -> bool:
        """Whether anyone holds this lock now; asking never creates its file (none: nobody).

        ``acquire`` creates the file; a holder that removes it when done (``order_store``)
        would otherwise find it made again by whoever merely asked, left until swept.
        """
        return _held(self.path, missing=False)

    def wait_free(self) -> None:
        """Wait until nobody holds this lock, without taking it or creating its file."""
        fd = _open_existing(self.path)
        if fd is None:
            return
        try_lock(fd, blocking=True)
        _let_go(fd)

    def release(self) -> None:
        _let_go(self._fds.pop(threading.get_ident()))

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_fds': {}}


class Lease:
    """A role one process of the node holds at a time (e.g. running the node's downloads).

    ``try_take`` never waits. The kernel ends the lease when its holder exits or is killed, so
    another process can take it over; a forked child does not inherit it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1
        self._pid = os.getpid()

    @property
    def held(self) -> bool:
        return self._fd >= 0 and self._pid == os.getpid()

    def try_take(self) -> bool:
        """Take the lease if nobody holds it; True if this process holds it now."""
        if self.held:
            return True
        fd = _open_lock_file(self.path)
        if not try_lock(fd):
            os.close(fd)
            return False
        self._fd, self._pid = fd, os.getpid()
        _leases.add(self)
        return True

    def give_up(self) -> None:
        # The descriptor is forgotten before it is closed. Between the two, another thread may
        # open a file that takes the freed number (torch makes a worker's pipes just before it
        # forks it), and a child forked then closes whatever ``_fd`` names (``_close_inherited``):
        # a DataLoader worker whose own pipe was closed that way exits at once with code 1,
        # printing nothing ("exited unexpectedly"; tests/coord/test_coord.py).
        held, fd = self.held, self._fd
        self._fd = -1
        if held:
            unlock(fd)
            os.close(fd)

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_fd': -1, '_pid': -1}


_leases: weakref.WeakSet = weakref.WeakSet()


def _close_inherited() -> None:
    """In a forked child: drop the descriptors of the parent's locks and leases."""
    me = threading.get_ident()  # The forking thread goes on in the child, with what it holds.
    for lock in list(_holding):
        for thread, fd in list(lock._fds.items()):
            if thread != me:
                try:
                    os.close(fd)
                except OSError:
                    pass
                del lock._fds[thread]
    for lease in list(_leases):
        if lease._fd >= 0:
            try:
                os.close(lease._fd)
            except OSError:
                pass
        lease._fd = -1
    _holding.clear()
    _leases.clear()


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_close_inherited)
