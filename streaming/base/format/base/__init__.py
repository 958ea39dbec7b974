"""The reference's ``streaming.base.format.base``: the shard reader and writer base classes."""

from streaming.format.reader import FileInfo, Reader

__all__ = ['FileInfo', 'Reader']
