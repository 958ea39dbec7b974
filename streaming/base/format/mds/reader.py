"""The reference's ``streaming.base.format.mds.reader``."""

from streaming.format.mds import MDSReader

__all__ = ['MDSReader']
