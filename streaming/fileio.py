"""Atomic file creation: the one way this library publishes a file on disk.

A file is written under a fresh temporary name in its final directory, created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (so a planted symlink or a leftover temporary file is never
written through), then renamed over the final path. A crash at any point leaves either the old
file or nothing under the final name, never a partial file. Every writer, downloader and cache
in the package goes through these three functions.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from typing import Any, BinaryIO, Iterator

__all__ = ['TEMP_SUFFIX', 'atomic_open', 'atomic_write', 'create_temp', 'file_etag', 'preallocate',
           'publish', 'remove_quietly']

# Every temporary file ends with this suffix, so cleaners can recognise abandoned ones.
TEMP_SUFFIX = '.tmp'

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0) | \
    getattr(os, 'O_CLOEXEC', 0)


def create_temp(path: str, mode: int = 0o644) -> tuple[int, str]:
    """Create a new, empty temporary file beside ``path``; returns ``(fd, temp_path)``.

    The name is random and the file is created exclusively, so it never existed before and is
    not a symlink. The caller writes through ``fd``, closes it and calls ``publish``.
    """
    directory = os.path.dirname(path) or '.'
    base = os.path.basename(path)
    for _ in range(16):
        temp = os.path.join(directory, f'.{base}.{secrets.token_hex(6)}{TEMP_SUFFIX}')
        try:
            return os.open(temp, _CREATE_FLAGS, mode), temp
        except FileExistsError:
            continue
    raise FileExistsError(f'Could not create a temporary file beside {path}.')


_FALLOC_FL_KEEP_SIZE = 1
_fallocate: Any = None  # libc's fallocate, False where there is none (see ``load_preallocate``).


def load_preallocate() -> bool:
    """Look up libc's ``fallocate`` now (Linux; ``preallocate`` is a no-op elsewhere).

    Called by the thread that builds a dataset, so that download threads never do the first
    import of ``ctypes`` (``streaming.cache.preload``). Returns whether it is available.
    """
    global _fallocate
    if _fallocate is None:
        _fallocate = False
        if sys.platform.startswith('linux'):
            try:
                import ctypes
                function = ctypes.CDLL(None, use_errno=True).fallocate
                function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
                function.restype = ctypes.c_int
                _fallocate = function
            except (OSError, AttributeError, ImportError):
                pass
    return bool(_fallocate)


def preallocate(fd: int, size: int | None) -> bool:
    """Reserve disk blocks for the first ``size`` bytes of ``fd`` before they are written.

    ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``: the file's size stays what its writes make it, so
    a short download still reads as short. On ext4 a write into blocks reserved up front costs
    the writer a fraction of one that allocates page by page (delayed allocation; figures in
    docs/benchmarks.md, issue 31). Best effort: without it, or if it fails (a full disk then
    fails the writes, as before), the file is as it was. Returns whether the blocks are reserved.
    """
    return bool(size) and load_preallocate() and _fallocate(fd, _FALLOC_FL_KEEP_SIZE, 0, size) == 0


def publish(temp_path: str, path: str) -> None:
    """Move a finished temporary file to its final name (atomic within one filesystem)."""
    os.replace(temp_path, path)


def remove_quietly(path: str) -> None:
    """Remove ``path`` if it exists; errors other than absence still raise."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


@contextlib.contextmanager
def atomic_open(path: str, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write ``path`` through a binary file object; it appears only if the block succeeds."""
    fd, temp = create_temp(path, mode)
    try:
        with os.fdopen(fd, 'wb') as file:
            yield file
        publish(temp, path)
    except BaseException:
        remove_quietly(temp)
        raise


def atomic_write(path: str, data: bytes | bytearray | memoryview | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically."""
    if isinstance(data, str):
        data = data.encode('utf-8')
    with atomic_open(path) as file:
        file.write(data)


def file_etag(st: os.stat_result) -> str:
    """A local file's version tag, as its listing records it: mtime (ns) and size."""
    return f'{st.st_mtime_ns}-{st.st_size}'
