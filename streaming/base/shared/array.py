"""The reference's ``streaming.base.shared.array``: a numpy array in named shared memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from streaming.base.shared.memory import SharedMemory

__all__ = ['SharedArray', 'SharedMemory']


class SharedArray:
    """A numpy array of ``shape`` and ``dtype`` over the shared block ``name``.

    The block is created, or attached to if it exists.
    """

    def __init__(self, shape: int | tuple[int, ...], dtype: type, name: str) -> None:
        self.shape = np.empty(shape).shape
        self.dtype = np.dtype(dtype)
        self.name = name
        size = max(int(np.prod(self.shape)) * self.dtype.itemsize, 1)
        self.shm = SharedMemory(name=name, size=size)

    def numpy(self) -> np.ndarray:
        """The array itself (a view of the shared block)."""
        return np.ndarray(self.shape, self.dtype, buffer=self.shm.buf)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> Any:
        return self.numpy()[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self.numpy()[index] = value
