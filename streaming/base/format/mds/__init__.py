"""The reference's ``streaming.base.format.mds`` import path."""

from streaming.format.mds import MDSReader, MDSWriter

__all__ = ['MDSReader', 'MDSWriter']
