"""``DirectoryLock``: one writer per output directory, enforced with ``flock`` on the directory.

The lock is taken on the directory itself (no lock file appears among the dataset's files) and
released by the kernel if the writer dies; a process the writer forks does not keep it. A second
writer into the same directory, in this process or another, fails at once with
``OutputLockedError`` naming the directory and, where ``/proc/locks`` tells, the process holding
it.
"""

from __future__ import annotations

import os

from streaming.coord.lock import LockFile, same_file
from streaming.errors import OutputError, OutputLockedError

__all__ = ['DirectoryLock']


class DirectoryLock:
    """An exclusive lock on one directory at a time; ``parameter`` names it in errors."""

    def __init__(self, parameter: str) -> None:
        self.parameter = parameter
        self._file: LockFile | None = None

    def acquire(self, path: str) -> None:
        """Lock ``path`` (a directory); a no-op if this lock already holds that directory."""
        try:
            file = LockFile(path, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
        except OSError as error:
            raise OutputError(f'{self.parameter}={path!r} cannot be opened as a directory: '
                              f'{error.strerror}.', error.errno) from None
        held = self._file
        if held is not None and held.is_open and same_file(os.fstat(file.fd),
                                                             os.fstat(held.fd)):
            file.close()
            return
        if not file.lock():
            holder = _holder(file.fd)
            file.close()
            raise OutputLockedError(f'{self.parameter}={path!r}: another writer is writing to '
                                    f'this directory ({holder}); two writers into one directory '
                                    f'would mix their shards. Wait for it to finish or write '
                                    f'elsewhere.') from None
        self.release()
        self._file = file

    def release(self) -> None:
        """Let the directory go (unlocked, then closed: see ``coord.lock.LockFile``)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __del__(self) -> None:
        self.release()


def _holder(fd: int) -> str:
    """Who holds the flock on ``fd``'s file, from ``/proc/locks`` (Linux); best effort."""
    st = os.fstat(fd)
    device = f'{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}'
    try:
        with open('/proc/locks') as f:
            lines = f.read().splitlines()
    except OSError:
        return 'held by another writer'
    for line in lines:
        fields = line.split()
        if len(fields) > 5 and fields[1] == 'FLOCK' and fields[5] == device:
            pid = fields[4]
            if pid == str(os.getpid()):
                return f'held by another writer in this process, pid {pid}'
            try:
                with open(f'/proc/{pid}/cmdline', 'rb') as f:
                    command = f.read().replace(b'\0', b' ').decode(errors='replace').strip()
            except OSError:
                command = ''
            return f'held by process {pid}' + (f': {command[:120]}' if command else '')
    return 'held by another writer'
