"""The reference's ``streaming.base.format.mds.writer``."""

from streaming.writing import MDSWriter

__all__ = ['MDSWriter']
