"""The reference's ``streaming.base.format.base.reader``."""

from streaming.format.reader import FileInfo, JointReader, Reader, SplitReader

__all__ = ['FileInfo', 'JointReader', 'Reader', 'SplitReader']
