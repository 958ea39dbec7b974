"""The MDS format: typed binary columns, one file per shard."""

from streaming.format.mds.reader import MDSReader
from streaming.format.mds.writer import MDSWriter

__all__ = ['MDSReader', 'MDSWriter']
