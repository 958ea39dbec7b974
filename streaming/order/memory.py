"""Epoch-sized arrays: where they live, and giving back what is no longer read.

``fresh_array`` is a private anonymous map for epoch-sized outputs; ``scratch_array`` a shared
map of an unlinked temporary file for epoch-sized working arrays that are written once and read
again later, a part at a time. ``release`` drops a part of either from this process's resident
memory: a scratch array's part stays in the file (and the page cache) and is read back on its
next access; a fresh array's part is discarded, so it is released only once never read again.
So a process computing a billion-sample order holds the window it works on, not the epoch.
"""

from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

__all__ = ['RELEASE_BYTES', 'fresh_array', 'release', 'scratch_array']

_MAP_BYTES = 1 << 26  # Arrays this big or bigger get a memory map of their own.
RELEASE_BYTES = 1 << 26  # Work between two releases, in bytes of the array worked on.


def fresh_array(length: int, dtype: type | np.dtype) -> np.ndarray:
    """An uninitialised 1-d array; epoch-sized ones live in an anonymous memory map of their own.

    numpy advises the kernel to back big allocations with huge pages; where the kernel then
    compacts memory on the page-fault path (transparent huge pages with ``defrag=madvise``, as
    on the benchmark machine), touching a fresh 400 MB array takes about 1 s instead of 0.15 s.
    A private anonymous map (what malloc uses for big blocks, copy-on-write after a fork) is
    never advised, and changes no numpy setting of the process.
    """
    dtype = np.dtype(dtype)
    nbytes = length * dtype.itemsize
    if nbytes < _MAP_BYTES:
        return np.empty(length, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype, length)


def scratch_array(length: int, dtype: type | np.dtype) -> np.ndarray:
    """An uninitialised 1-d working array; epoch-sized ones are backed by a temporary file.

    The file (in ``tempfile.gettempdir()``) is unlinked at once: it goes with the last map.
    """
    dtype = np.dtype(dtype)
    nbytes = length * dtype.itemsize
    if nbytes < _MAP_BYTES:
        return np.empty(length, dtype)
    fd, path = tempfile.mkstemp(prefix='.shardflow-scratch-')
    try:
        os.unlink(path)
        os.ftruncate(fd, nbytes)
        buffer = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
    finally:
        os.close(fd)
    return np.frombuffer(buffer, dtype, length)


def release(array: np.ndarray, start: int, stop: int) -> None:
    """Drop elements ``start:stop`` of a (view of a) mapped array from resident memory.

    Whole pages inside the range only; a no-op for arrays not in a map of their own.
    """
    root = array
    while isinstance(root, np.ndarray):
        root = root.base
    root = getattr(root, 'obj', root)  # np.frombuffer keeps a memoryview of the map.
    if not isinstance(root, mmap.mmap) or stop <= start:
        return
    origin = np.frombuffer(root, np.uint8).__array_interface__['data'][0]
    first = array.__array_interface__['data'][0] - origin + start * array.itemsize
    last = first + (stop - start) * array.itemsize
    page = mmap.PAGESIZE
    first, last = -(-first // page) * page, last // page * page
    if last > first:
        root.madvise(mmap.MADV_DONTNEED, first, last - first)
