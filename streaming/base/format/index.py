"""The reference's ``streaming.base.format.index``."""

from streaming.format.index import get_index_basename

__all__ = ['get_index_basename']
