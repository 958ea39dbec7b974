"""``FileLock``: an exclusive ``flock`` on a file, shared by threads and processes of a node.

Waiting blocks in the kernel instead of polling, and a lock held by a killed process is released
by the kernel, so a crash never leaves a lock behind.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import Any

__all__ = ['FileLock']


class FileLock:
    """An exclusive ``flock`` on ``path``; a context manager, safe across threads and processes.

    Each thread takes the lock through a descriptor of its own, so two threads of one process
    exclude each other as two processes do.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fds: dict[int, int] = {}

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, return False at once if someone holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, 'O_CLOEXEC', 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self._fds[threading.get_ident()] = fd
        return True

    def release(self) -> None:
        fd = self._fds.pop(threading.get_ident())
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        return {'path': self.path, '_fds': {}}
