"""The reference's ``streaming.base.shared.scalar``: one number in named shared memory."""

from __future__ import annotations

from typing import Any

from streaming.base.shared.array import SharedArray

__all__ = ['SharedArray', 'SharedScalar']


class SharedScalar:
    """A value of ``dtype`` in the shared block ``name``: ``get()`` and ``set(value)``."""

    def __init__(self, dtype: type, name: str) -> None:
        self.dtype = dtype
        self.name = name
        self.arr = SharedArray(1, dtype, name)

    def get(self) -> Any:
        """The current value."""
        return self.arr[0]

    def set(self, value: Any) -> None:
        """Store ``value``."""
        self.arr[0] = value
