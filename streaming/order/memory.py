"""Epoch-sized arrays: where they live, and giving back what is no longer read.

``fresh_array`` is a private anonymous map for epoch-sized outputs; ``release`` drops a part of
one from this process's resident memory (the part is discarded: released only once it is never
read again, e.g. once written to the order file). So a process computing a billion-sample order
holds the window it works on, not the epoch.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ['fresh_array', 'release']

_MAP_BYTES = 1 << 26  # Arrays this big or bigger get a memory map of their own.


def fresh_array(length: int, dtype: type | np.dtype) -> np.ndarray:
    """An uninitialised 1-d array; epoch-sized ones live in an anonymous memory map of their own.

    numpy advises the kernel to back big allocations with huge pages; where the kernel then
    compacts memory on the page-fault path (transparent huge pages with ``defrag=madvise``, as
    on the benchmark machine), touching a fresh epoch-sized array takes several times as long
    (docs/shuffling.md, "Setup time and memory").
    A private anonymous map (what malloc uses for big blocks, copy-on-write after a fork) is
    never advised, and changes no numpy setting of the process.
    """
    dtype = np.dtype(dtype)
    nbytes = length * dtype.itemsize
    if nbytes < _MAP_BYTES:
        return np.empty(length, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype, length)


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
