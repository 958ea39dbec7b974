"""The node's kernel locks: ``FileLock``, ``Lease``, ``LockFile`` and the ``flock`` primitives.

Waiting blocks in the kernel instead of polling, and a lock held by a killed process is released
by the kernel, so a crash never leaves a lock behind. ``is_locked`` is for code that only asks
whether someone holds a file (``streaming clean``).

A forked child shares its parent's open files, and an ``flock`` belongs to the open file, not to
the process: a child holding a copy of a locked descriptor keeps the lock for as long as it
lives, even after the parent closed its own. So every descriptor this package locks is a
``LockFile``: registered while open, so that a forked child (a DataLoader worker) closes its copy
at once, and unlocked before it is closed, which releases the lock for every copy.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from typing import Any

__all__ = ['FileLock', 'Lease', 'LockFile', 'is_locked', 'same_file']

_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)


def try_lock(fd: int, blocking: bool = False) -> bool:
    """Lock the open descriptor ``fd`` exclusively; False at once if held and not ``blocking``.

    ``LockFile``'s primitive: a descriptor locked here is let go through ``LockFile.close``
    (closing it alone keeps the lock while a forked child holds a copy).
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    """Release the lock on ``fd`` (the descriptor stays open)."""
    fcntl.flock(fd, fcntl.LOCK_UN)


# Every ``LockFile`` open in this process, by descriptor: a forked child closes its copies.
_open_files: dict[int, LockFile] = {}


class LockFile:
    """A descriptor opened to take an ``flock`` on, registered until ``close``.

    ``close`` unlocks before it closes: closing alone releases a flock only when no other
    process holds a copy of the descriptor, and a child forked by another thread meanwhile
    would keep the lock (and a node's processes waiting on it would wait for that child). A
    forked child closes its copy at once without unlocking (which would unlock the parent
    too), unless its forking thread is ``keep_for``: that thread goes on in the child with
    the lock it took, and the child's ``close`` then only closes its copy.
    """

    def __init__(self, path: str, flags: int = os.O_RDWR | os.O_CREAT, mode: int = 0o600,
                 keep_for: int | None = None) -> None:
        self.fd = os.open(path, flags | _CLOEXEC, mode)
        self.opener, self.keep_for = os.getpid(), keep_for
        _open_files[self.fd] = self  # Before it is locked: a child forked from now on drops it.

    @classmethod
    def existing(cls, path: str, flags: int = os.O_RDONLY) -> LockFile | None:
        """The file at ``path`` opened, never creating it (None: there is no such file)."""
        try:
            return cls(path, flags)
        except FileNotFoundError:
            return None

    def lock(self, blocking: bool = False) -> bool:
        """Take the lock; False at once if someone holds it and not ``blocking``."""
        return try_lock(self.fd, blocking)

    @property
    def is_open(self) -> bool:
        return self.fd >= 0

    def close(self) -> None:
        """Unlock (if this process opened it), forget, then close the descriptor; idempotent.

        The descriptor is forgotten only after it is unlocked (a child forked between the two
        drops a copy that holds nothing), and before it is closed: a child forked after the
        close must not close, as ours, a file of another thread that took the freed number.
        """
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        try:
            if self.opener == os.getpid():
                unlock(fd)
        finally:
            _open_files.pop(fd, None)
            os.close(fd)


def is_locked(path: str) -> bool:
    """Whether some process holds ``path`` locked now (True too if it cannot be opened)."""
    return _held(path, missing=True)


def _held(path: str, missing: bool) -> bool:
    """Whether some descriptor holds ``path`` locked now; ``missing`` if there is no such file."""
    try:
        got = _probe(path, blocking=False)
    except OSError:
        return True
    return missing if got is None else not got


def _probe(path: str, blocking: bool) -> bool | None:
    """Take the lock of the file at ``path`` and let it go at once, never creating the file.

    Whether it was had (with ``blocking``, once free); None if there is no such file.
    """
    file = LockFile.existing(path)
    if file is None:
        return None
    try:
        return file.lock(blocking)
    finally:
        file.close()  # Unlocks the probe's lock first: see ``LockFile``.


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
        self._fds: dict[int, LockFile] = {}

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, return False at once if someone holds it.

        A holder may remove the lock file before it lets go (``order_store`` does, so the
        node's shared directory does not grow). Whoever opened that file meanwhile and then
        gets its lock holds a lock nobody else can see (a new file takes the name): so the
        lock counts only if the locked file is still the one at ``path``; else try again.
        """
        thread = threading.get_ident()
        while True:
            file = LockFile(self.path, keep_for=thread)
            if not file.lock(blocking):
                file.close()
                return False
            if _is_file_at(file.fd, self.path):
                break
            file.close()
        self._fds[thread] = file
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
        _probe(self.path, blocking=True)

    def release(self) -> None:
        self._fds.pop(threading.get_ident()).close()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_fds': {}}


_holding: weakref.WeakSet = weakref.WeakSet()  # FileLocks that hold a descriptor now.


class Lease:
    """A role one process of the node holds at a time (e.g. running the node's downloads).

    ``try_take`` never waits. The kernel ends the lease when its holder exits or is killed, so
    another process can take it over; a forked child does not inherit it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: LockFile | None = None

    @property
    def held(self) -> bool:
        file = self._file
        return file is not None and file.is_open and file.opener == os.getpid()

    def try_take(self) -> bool:
        """Take the lease if nobody holds it; True if this process holds it now."""
        if self.held:
            return True
        file = LockFile(self.path)
        if not file.lock():
            file.close()
            return False
        self._file = file
        return True

    def give_up(self) -> None:
        # Forgotten here before it is closed: ``LockFile.close`` says why (torch makes a
        # worker's pipes just before it forks it, and a worker whose own pipe a fork hook closed
        # exits at once with code 1, printing nothing; tests/coord/test_coord.py).
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_file': None}


def _close_inherited() -> None:
    """In a forked child: close the copies of the parent's lock files, without unlocking."""
    me = threading.get_ident()  # The forking thread goes on in the child, with what it took.
    for fd, file in list(_open_files.items()):
        if file.keep_for != me:
            del _open_files[fd]
            file.fd = -1
            try:
                os.close(fd)
            except OSError:
                pass
    for lock in list(_holding):
        for thread, file in list(lock._fds.items()):
            if not file.is_open:
                del lock._fds[thread]


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_close_inherited)
