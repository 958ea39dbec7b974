"""The reference's ``streaming.base.array``: numpy-style indexing (``Array``) for datasets."""

from streaming.indexing import IndexingMixin as Array

__all__ = ['Array']
