"""The reference's ``streaming.base.format.mds.writer``."""

from streaming.format.mds import MDSWriter

__all__ = ['MDSWriter']
