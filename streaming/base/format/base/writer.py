"""The reference's ``streaming.base.format.base.writer``."""

from streaming.writing import JointWriter, SplitWriter
from streaming.writing import UploadingWriter as Writer

__all__ = ['JointWriter', 'SplitWriter', 'Writer']
