"""The reference's ``streaming.base.format.mds`` import path."""

from streaming.format.mds import MDSReader
from streaming.writing import MDSWriter

__all__ = ['MDSReader', 'MDSWriter']
