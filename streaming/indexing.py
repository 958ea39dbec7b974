"""numpy-style indexing for anything with ``__len__`` and ``get_item(int)``."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ['IndexingMixin']


class IndexingMixin:
    """Mixin: ``x[i]``, ``x[-1]``, ``x[2:10:3]``, ``x[[1, 5]]`` and ``x[np.array(...)]``.

    Ints wrap once from the end like Python; slices clamp like Python; lists and arrays give a
    list of items (nested lists for nested indices).
    """

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def size(self) -> int:
        """The number of items."""
        return len(self)

    def get_item(self, idx: int) -> Any:
        raise NotImplementedError

    def _index(self, idx: int) -> int:
        size = self.size
        if idx < 0:
            idx += size
        if not 0 <= idx < size:
            raise IndexError(f'Index {idx if idx >= 0 else idx - size} is out of range for '
                             f'{type(self).__name__} of {size} items.')
        return idx

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, (int, np.integer)) and not isinstance(at, (bool, np.bool_)):
            return self.get_item(self._index(int(at)))
        if isinstance(at, slice):
            return [self.get_item(i) for i in range(*at.indices(self.size))]
        if isinstance(at, (list, tuple)):
            return [self[i] for i in at]
        if isinstance(at, np.ndarray):
            if at.dtype.kind not in 'iu':
                raise ValueError(f'Index arrays must be of an integer dtype, got {at.dtype}.')
            return [self[i] for i in at.tolist()]
        raise ValueError(f'Unsupported index {at!r} of type {type(at).__name__}: use an int, a '
                         f'slice, a list or a numpy integer array.')
